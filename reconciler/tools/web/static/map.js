// Troupe's topology map: reads data.json (reconciler/tools/web/data.py), draws the tree as
// nested boxes down to the level above the hosts and every host's nodes as cells, lists the
// waiting gangs and the gangs on nodes, finds a gang, and reads the data again every
// refreshSeconds. The map is drawn again only when its digest changed. Times, in ms, are
// left on <body> for whoever measures the page: data-fetch-ms, data-draw-ms (map built and
// laid out), data-frame-ms (to the next frame), data-ready-ms (first draw, from navigation).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const body = document.body, mapEl = $("map"), search = $("search"), statusEl = $("status");
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
  const colours = new Map();
  let data = null, digest = null, nodes = [], paths = [], cells = [], byGang = new Map(), rows = new Map();
  let hits = [], draws = 0, timer = 0;

  function colour(key) {
    let c = colours.get(key);
    if (c === undefined) {
      let h = 2166136261;
      for (let i = 0; i < key.length; i++) { h ^= key.charCodeAt(i); h = Math.imul(h, 16777619); }
      h >>>= 0;
      c = "hsl(" + (h % 360) + " " + (55 + (h >>> 9) % 25) + "% " + (38 + (h >>> 17) % 20) + "%)";
      colours.set(key, c);
    }
    return c;
  }
  const short = (level) => level.split("/").pop().replace(/^gce-topology-/, "");
  function duration(s) {
    if (s === null || s === undefined) return "";
    s = Math.round(s);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? " " + (s % 60) + "s" : "");
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }
  function mark(i, key) {
    let list = byGang.get(key);
    if (list === undefined) byGang.set(key, (list = []));
    if (list[list.length - 1] !== i) list.push(i);
  }

  function cell(n, path, out) {
    const i = nodes.length;
    nodes.push(n); paths.push(path);
    let cls = "c", style = "", main = null, units = -1;
    for (const h of n.holders) { if (h.units > units) { main = h.gang; units = h.units; } mark(i, h.gang); }
    for (const g of n.reserved || []) mark(i, g);
    for (const g of n.nominated || []) mark(i, g);
    if (main === null && n.reserved) main = n.reserved[0];
    if (main === null && n.nominated) main = n.nominated[0];
    const used = main !== null || n.otherPods > 0;
    const free = n.allocatable > 0 ? Math.max(n.free, 0) / n.allocatable : (used ? 0 : 1);
    if (!n.ready || n.cordoned) cls += " x";
    else if (!used && free >= 1) cls += " e";
    if (n.avoided) cls += " v";
    if (n.reserved) cls += " r";
    if (n.nominated) cls += " m";
    if (main !== null) style = "--g:" + colour(main) + ";";
    if (free > 0 && free < 1) style += "--f:" + Math.round(free * 100) + "%";
    const held = n.holders.length ? " · " + n.holders.map((h) => h.gang).join(", ") : "";
    out.push('<i class="' + cls + '" data-i="' + i + '" data-node="' + esc(n.name) + '"' +
      (style ? ' style="' + style + '"' : "") + ' title="' + esc(n.name + ": " + Math.max(n.free, 0) + " of " +
      n.allocatable + " free" + held) + '"></i>');
  }

  function domain(d, path, out) {
    const here = path.concat(short(d.level) + " " + d.name);
    if (d.nodes) { for (const n of d.nodes) cell(n, here, out); return; }
    const hosts = d.children.length > 0 && d.children[0].nodes !== undefined;
    out.push('<div class="d"><b>' + esc(here[here.length - 1]) + " · " + d.free + " of " + d.allocatable +
      ' free</b><div class="' + (hosts ? "n" : "k") + '">');
    for (const c of d.children) {
      if (hosts && c.nodes.length > 1) { out.push('<span class="h">'); domain(c, here, out); out.push("</span>"); }
      else domain(c, here, out);
    }
    out.push("</div></div>");
  }

  function drawMap(d) {
    const t0 = performance.now();
    nodes = []; paths = []; byGang = new Map(); hits = [];
    const out = [];
    if (d.tree.children) for (const c of d.tree.children) domain(c, [], out);
    else domain(d.tree, [], out);
    mapEl.classList.toggle("big", nodes.length <= 256);
    mapEl.innerHTML = out.join("");
    cells = Array.prototype.slice.call(mapEl.getElementsByClassName("c"));
    void mapEl.offsetHeight; // style and layout now, so that the time includes them
    const ms = performance.now() - t0;
    body.dataset.drawMs = ms.toFixed(1);
    requestAnimationFrame(() => { body.dataset.frameMs = (performance.now() - t0).toFixed(1); });
    draws += 1;
    body.dataset.draws = String(draws);
  }

  function gangItem(r) {
    const size = r.size === null || r.size === undefined ? "?" : r.size;
    const members = r.members ? r.members.present : r.present;
    const bits = [];
    if (members !== undefined) bits.push(members + " of " + size + " present");
    if (r.queuePosition) bits.push("queue #" + r.queuePosition);
    if (r.waitingSeconds !== null && r.waitingSeconds !== undefined) bits.push("waiting " + duration(r.waitingSeconds));
    return '<li data-gang="' + esc(r.gang) + '"><span class="sw" style="background:' + colour(r.gang) + '"></span><b>' +
      esc(r.gang) + '</b><span class="ph">' + esc(r.phase) + "</span>" + (bits.length ? " · " + esc(bits.join(" · ")) : "") +
      '<span class="why">' + esc(r.reason) + "</span></li>";
  }

  function drawLists(d) {
    rows = new Map(d.gangs.map((r) => [r.gang, r]));
    const waiting = d.gangs.filter((r) => r.waiting);
    $("waiting").innerHTML = waiting.map(gangItem).join("") || "<li>none</li>";
    $("waiting-count").textContent = "(" + waiting.length + ")";
    const holding = Array.from(byGang.keys()).sort();
    $("holding").innerHTML = holding.map((k) => '<li data-gang="' + esc(k) + '"><span class="sw" style="background:' +
      colour(k) + '"></span>' + esc(k) + " · " + byGang.get(k).length + " node" + (byGang.get(k).length === 1 ? "" : "s") +
      (rows.has(k) ? '<span class="ph">' + esc(rows.get(k).phase) + "</span>" : "") + "</li>").join("");
    $("holding-count").textContent = "(" + holding.length + ")";
    const s = d.summary;
    $("summary").textContent = d.source + " · decided " + d.at + " · " + s.nodes + " nodes · " + s.free + " of " +
      s.allocatable + " " + d.resource + " free · " + s.gangs + " gangs, " + s.waiting + " waiting";
  }

  function showGang(keys) {
    const det = $("detail");
    if (!keys.length) { det.hidden = false; det.innerHTML = "<p>No gang matches.</p>"; return; }
    const k = keys[0], r = rows.get(k), on = byGang.get(k) || [];
    const names = on.slice(0, 24).map((i) => nodes[i].name).join(", ") + (on.length > 24 ? ", …" : "");
    det.hidden = false;
    det.innerHTML = "<p><b>" + esc(k) + "</b>" + (r ? ' <span class="ph">' + esc(r.phase) + "</span>" : "") + "</p>" +
      (r ? "<p>" + esc(r.reason) + "</p>" : "") + "<p>" + on.length + " node" + (on.length === 1 ? "" : "s") +
      (on.length ? ": " + esc(names) : "") + "</p>" +
      (keys.length > 1 ? "<p>" + (keys.length - 1) + " more match: " + esc(keys.slice(1, 6).join(", ")) + "</p>" : "");
  }

  function find() {
    for (const c of hits) c.classList.remove("hit");
    hits = [];
    const q = search.value.trim().toLowerCase();
    if (!q) { mapEl.classList.remove("searching"); $("detail").hidden = true; return; }
    const all = new Set([...rows.keys(), ...byGang.keys()]);
    let keys = Array.from(all).filter((k) => k.toLowerCase() === q);
    if (!keys.length) keys = Array.from(all).filter((k) => k.toLowerCase().includes(q)).sort();
    for (const k of keys) for (const i of byGang.get(k) || []) { cells[i].classList.add("hit"); hits.push(cells[i]); }
    mapEl.classList.add("searching");
    body.dataset.hits = String(hits.length);
    showGang(keys);
    if (hits.length) hits[0].scrollIntoView({ block: "nearest" });
  }

  function showNode(i) {
    const n = nodes[i], det = $("detail");
    const held = n.holders.map((h) => esc(h.gang) + " (" + h.units + " " + esc(data.resource) + ", " + h.pods + " pod" +
      (h.pods === 1 ? "" : "s") + ")").join("<br>");
    const state = !n.ready ? "not ready" : n.cordoned ? "cordoned" : n.avoided ? "avoided: " + n.avoided : "ready";
    det.hidden = false;
    det.innerHTML = "<p><b>" + esc(n.name) + "</b> · " + esc(paths[i].join(" › ")) + "</p><p>" + Math.max(n.free, 0) +
      " of " + n.allocatable + " " + esc(data.resource) + " free · " + esc(state) + "</p>" +
      (held ? "<p>" + held + "</p>" : "") + (n.otherPods ? "<p>" + n.otherPods + " other pod(s)</p>" : "") +
      (n.reserved ? "<p>reserved for " + esc(n.reserved.join(", ")) + "</p>" : "") +
      (n.nominated ? "<p>nominated for " + esc(n.nominated.join(", ")) + "</p>" : "");
  }

  function apply(d, fetchMs) {
    data = d;
    body.dataset.fetchMs = fetchMs.toFixed(1);
    if (d.mapDigest !== digest) { drawMap(d); digest = d.mapDigest; }
    drawLists(d);
    find();
    statusEl.className = "";
    statusEl.textContent = d.refreshSeconds > 0 ? "updates every " + d.refreshSeconds + "s" : "";
    if (!body.dataset.readyMs) body.dataset.readyMs = performance.now().toFixed(1);
    body.dataset.state = "drawn";
  }

  async function load() {
    const t0 = performance.now();
    let next = data ? data.refreshSeconds : 5;
    try {
      const headers = bearer ? { Authorization: "Bearer " + bearer } : {};
      const r = await fetch("data.json", { cache: "no-store", headers: headers });
      const d = JSON.parse(await r.text());
      if (r.status === 401) throw new Error(d.error + ": open this page as .../topology/#token=<a bearer token>");
      if (!r.ok) throw new Error(d.error || "HTTP " + r.status);
      next = d.refreshSeconds;
      apply(d, performance.now() - t0);
    } catch (e) {
      statusEl.className = "error";
      statusEl.textContent = "cannot read the data: " + e.message + (data ? " (showing the last map)" : "");
      if (!data) body.dataset.state = "error";
    }
    if (next > 0) timer = setTimeout(load, next * 1000);
  }

  let typing = 0;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { history.replaceState(null, "", search.value ? "#gang=" + encodeURIComponent(search.value) : "#"); find(); }, 120);
  });
  mapEl.addEventListener("click", (e) => { const i = e.target.dataset && e.target.dataset.i; if (i !== undefined) showNode(+i); });
  $("side").addEventListener("click", (e) => {
    const li = e.target.closest("li[data-gang]");
    if (li) { search.value = li.dataset.gang; find(); }
  });
  // The reconciler's page answers a bearer token (docs/decisions/049): given in the address's
  // fragment (never sent to a server, nor logged), kept for this tab and taken out of the address.
  const given = /^#token=([^&]*)&?(.*)$/.exec(location.hash);
  if (given) {
    sessionStorage.setItem("troupe-map-bearer", given[1]);
    history.replaceState(null, "", given[2] ? "#" + given[2] : location.pathname + location.search);
  }
  const bearer = sessionStorage.getItem("troupe-map-bearer");
  const wanted = /^#gang=(.*)$/.exec(location.hash);
  if (wanted) {
    // An address typed or pasted by hand may hold a lone '%': search for it as it is.
    try { search.value = decodeURIComponent(wanted[1]); } catch (e) { search.value = wanted[1]; }
  }
  // For scripts and tests: read again now; find a gang as the search box does (returns the ms it took).
  window.troupeMap = {
    reload: () => { clearTimeout(timer); return load(); },
    find: (q) => { search.value = q; const t = performance.now(); find(); return performance.now() - t; },
  };
  load();
})();
