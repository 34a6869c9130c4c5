// Troupe's topology map: reads data.json (reconciler/tools/web/data.py), draws the tree as
// nested boxes down to the level above the hosts and every host's nodes as cells, lists the
// waiting gangs and the gangs on nodes (grouped by namespace), filters by namespace, finds a
// gang, and reads the data again every refreshSeconds. The map is drawn again only when its
// digest changed. A cell has the colour of its main gang's namespace (Tableau 20 without its
// greys: docs/decisions/053-map-at-scale.md); hovering it outlines the gang's other cells.
// A node held for a waiting gang (a head-of-line hold or a Backfill reservation: its
// "held" mark, docs/decisions/079) is outlined solid; its detail says for whom and from when.
// Times, in ms, are left on <body> for whoever measures the page: data-fetch-ms,
// data-draw-ms (map built and laid out), data-frame-ms (to the next frame), data-ready-ms
// (first draw, from navigation).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const body = document.body, mapEl = $("map"), search = $("search"), statusEl = $("status"), nsEl = $("ns");
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
  // Tableau 20 without its two greys (grey is the colour of pods outside any gang), the
  // strong hues first: the first nine namespaces get colours no one confuses.
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#499894", "#b6992d", "#d37295", "#9d7660",
    "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#86bcb6", "#f1ce63", "#fabfd2", "#d7b5a6"];
  // Past this many gangs on nodes, a namespace's group of the list starts closed; past this
  // many waiting gangs, the list shows the first ones only.
  const OPEN_GANGS = 40, WAITING_SHOWN = 50;
  let colours = new Map();
  let data = null, digest = null, nodes = [], paths = [], cells = [], mains = [], byGang = new Map(), rows = new Map();
  let nodeIndex = new Map(), hits = [], peers = [], draws = 0, timer = 0, namespace = "";
  let heldBy = new Map(); // gang key -> the cells held for it (not its own: it has not started there)
  const opened = new Map(); // namespace -> open or closed, as the reader left its group
  let nsNames = null;

  // A gang key's namespace; "" for a SharedDeviceGroup's (group:<name>, cluster-scoped).
  const nsOf = (key) => { const k = key.indexOf("/"); return k < 0 ? "" : key.slice(0, k); };
  function colour(key) {
    const ns = nsOf(key);
    let c = colours.get(ns);
    if (c === undefined) { c = PALETTE[colours.size % PALETTE.length]; colours.set(ns, c); }
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
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  // HH:MM:SS of an RFC 3339 time in UTC (the data's times, as the reasons write them).
  const clock = (t) => String(t).slice(11, 19);
  // Why a node is held for gang key: its reservation's start, or the head of the queue
  // (without the gang's row, only for whom).
  function heldFor(key) {
    const h = rows.has(key) ? rows.get(key).held : null;
    if (!h) return "held for " + key;
    if (h.reservation) {
      const start = rows.get(key).expectedStart;
      return "held for " + key + (start ? " (reserved from " + clock(start) + ")" : " (reserved, from when a pod without a time limit ends)");
    }
    return "held for " + key + " (head of the queue)";
  }

  function cell(n, path, out) {
    const i = nodes.length;
    nodes.push(n); paths.push(path); nodeIndex.set(n.name, i);
    let cls = "c", style = "", main = null, units = -1;
    for (const h of n.holders) { if (h.units > units) { main = h.gang; units = h.units; } mark(i, h.gang); }
    for (const g of n.reserved || []) mark(i, g);
    for (const g of n.nominated || []) mark(i, g);
    for (const g of n.held || []) { let l = heldBy.get(g); if (l === undefined) heldBy.set(g, (l = [])); l.push(i); }
    if (main === null && n.reserved) main = n.reserved[0];
    if (main === null && n.nominated) main = n.nominated[0];
    mains.push(main);
    // Pods outside any gang make a node look used only for a meaningful share of it
    // (otherUse, from their requests); DaemonSet and static pods never do.
    const other = main === null && n.otherUse === true;
    let free = n.allocatable > 0 ? Math.max(n.free, 0) / n.allocatable : (main !== null || other ? 0 : 1);
    if (other) free = Math.min(free, 1 - Math.max(0, ...Object.values(n.otherShare || {})));
    if (!n.ready || n.cordoned) cls += " x";
    else if (main === null && !other && free >= 1) cls += " e";
    if (n.avoided) cls += " v";
    if (n.reserved) cls += " r";
    if (n.nominated) cls += " m";
    if (n.held) cls += " hd";
    if (main !== null) style = "--g:" + colour(main) + ";";
    if (free > 0 && free < 1) style += "--f:" + Math.round(free * 100) + "%";
    const held = n.holders.length ? " · " + n.holders.map((h) => h.gang).join(", ") : "";
    const kept = n.held ? " · held for " + n.held.join(", ") : "";
    out.push('<i class="' + cls + '" data-i="' + i + '" data-node="' + esc(n.name) + '"' +
      (style ? ' style="' + style + '"' : "") + ' title="' + esc(n.name + ": " + Math.max(n.free, 0) + " of " +
      n.allocatable + " free" + held + kept) + '"></i>');
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

  function holdersOf(t, into) {
    for (const n of t.nodes || []) for (const h of n.holders) into.add(nsOf(h.gang));
    for (const c of t.children || []) holdersOf(c, into);
    return into;
  }

  function drawMap(d) {
    const t0 = performance.now();
    nodes = []; paths = []; mains = []; byGang = new Map(); heldBy = new Map(); nodeIndex = new Map(); hits = []; peers = [];
    // Colours go to the namespaces in name order, so a namespace keeps its colour while the set stays.
    const names = holdersOf(d.tree, new Set(d.gangs.map((r) => nsOf(r.gang))));
    colours = new Map();
    for (const ns of Array.from(names).sort()) colour(ns + "/");
    const out = [];
    if (d.tree.children) for (const c of d.tree.children) domain(c, [], out);
    else domain(d.tree, [], out);
    mapEl.classList.toggle("big", nodes.length <= 256);
    mapEl.innerHTML = out.join("");
    cells = Array.prototype.slice.call(mapEl.getElementsByClassName("c"));
    filterMap();
    void mapEl.offsetHeight; // style and layout now, so that the time includes them
    const ms = performance.now() - t0;
    body.dataset.drawMs = ms.toFixed(1);
    requestAnimationFrame(() => { body.dataset.frameMs = (performance.now() - t0).toFixed(1); });
    draws += 1;
    body.dataset.draws = String(draws);
  }

  // The namespace filter: the cells of other namespaces' gangs faded, the lists left to this one.
  function filterMap() {
    mapEl.classList.toggle("filtered", namespace !== "");
    for (let i = 0; i < cells.length; i++) {
      cells[i].classList.toggle("o", namespace !== "" && mains[i] !== null && nsOf(mains[i]) !== namespace);
    }
  }
  const shown = (key) => namespace === "" || nsOf(key) === namespace;

  function gangItem(r) {
    const size = r.size === null || r.size === undefined ? "?" : r.size;
    const members = r.members ? r.members.present : r.present;
    const bits = [];
    if (members !== undefined) bits.push(members + " of " + size + " present");
    if (r.queuePosition) bits.push("queue #" + r.queuePosition);
    if (r.waitingSeconds !== null && r.waitingSeconds !== undefined) bits.push("waiting " + duration(r.waitingSeconds));
    if (r.reserved) bits.push(r.expectedStart ? "expected start " + clock(r.expectedStart) : "start not known");
    return '<li data-gang="' + esc(r.gang) + '"><span class="sw" style="background:' + colour(r.gang) + '"></span><b>' +
      esc(r.gang) + '</b><span class="ph">' + esc(r.phase) + "</span>" + (bits.length ? " · " + esc(bits.join(" · ")) : "") +
      '<span class="why">' + esc(r.reason) + "</span></li>";
  }

  function drawLists(d) {
    rows = new Map(d.gangs.map((r) => [r.gang, r]));
    const waiting = d.gangs.filter((r) => r.waiting && shown(r.gang));
    $("waiting").innerHTML = (waiting.slice(0, WAITING_SHOWN).map(gangItem).join("") || "<li>none</li>") +
      (waiting.length > WAITING_SHOWN ? '<li class="more">' + (waiting.length - WAITING_SHOWN) +
        " more: choose a namespace or search</li>" : "");
    $("waiting-count").textContent = "(" + waiting.length + ")";
    // The gangs on nodes, and those whose plan or reservation names nodes (not started yet).
    const holding = Array.from(new Set([...byGang.keys(), ...d.gangs.filter((r) => r.nodes).map((r) => r.gang)]))
      .filter(shown).sort();
    const groups = new Map();
    for (const k of holding) { const ns = nsOf(k); if (!groups.has(ns)) groups.set(ns, []); groups.get(ns).push(k); }
    const out = [];
    for (const [ns, keys] of groups) {
      const count = new Set(keys.flatMap(cellsOf)).size;
      const open = opened.has(ns) ? opened.get(ns) : holding.length <= OPEN_GANGS || groups.size === 1;
      out.push('<details data-ns="' + esc(ns) + '"' + (open ? " open" : "") + '><summary><span class="sw" style="background:' +
        colour(ns + "/") + '"></span><b>' + (ns ? esc(ns) : "shared device groups") + "</b> · " + plural(keys.length, "gang") + " · " + plural(count, "node") +
        "</summary><ul>");
      for (const k of keys) {
        out.push('<li data-gang="' + esc(k) + '"><span class="sw" style="background:' + colour(k) + '"></span>' + esc(k) + " · " + plural(cellsOf(k).length, "node") + (byGang.has(k) ? "" : " planned") +
          (rows.has(k) ? '<span class="ph">' + esc(rows.get(k).phase) + "</span>" : "") + "</li>");
      }
      out.push("</ul></details>");
    }
    $("holding").innerHTML = out.join("");
    $("holding-count").textContent = "(" + holding.length + ")";
    const names = Array.from(new Set([...d.gangs.map((r) => nsOf(r.gang)), ...Array.from(byGang.keys(), nsOf)]))
      .filter((ns) => ns !== "").sort();
    if (namespace && !names.includes(namespace)) names.push(namespace);
    if (names.join("\n") !== nsNames) { // rebuilt only when the namespaces change: an open menu stays open
      nsNames = names.join("\n");
      nsEl.innerHTML = '<option value="">all namespaces</option>' + names.map((ns) => '<option value="' + esc(ns) + '"' +
        ">" + esc(ns) + "</option>").join("");
    }
    nsEl.value = namespace;
    const s = d.summary;
    $("summary").textContent = d.source + " · decided " + d.at + " · " + s.nodes + " nodes · " + s.free + " of " +
      s.allocatable + " " + d.resource + " free · " + s.gangs + " gangs, " + s.waiting + " waiting";
  }

  // The cells of a gang: the nodes it holds or is held for in the tree (its holders, reserved,
  // nominated and held marks), and those its plan or reservation names (its row's nodes), each once.
  function cellsOf(key) {
    const found = new Set([...(byGang.get(key) || []), ...(heldBy.get(key) || [])]);
    const r = rows.get(key);
    for (const name of (r && r.nodes) || []) { const i = nodeIndex.get(name); if (i !== undefined) found.add(i); }
    return Array.from(found).sort((a, b) => a - b);
  }

  function showGang(keys) {
    const det = $("detail");
    if (!keys.length) { det.hidden = false; det.innerHTML = "<p>No gang matches.</p>"; return; }
    const k = keys[0], r = rows.get(k), on = cellsOf(k);
    // Not started on its cells: its plan names them, or they are held for it.
    const planned = byGang.has(k) || !on.length ? "" : r && r.nodes ? " planned" : " held for it";
    const names = on.slice(0, 24).map((i) => nodes[i].name).join(", ") + (on.length > 24 ? ", …" : "");
    det.hidden = false;
    det.innerHTML = "<p><b>" + esc(k) + "</b>" + (r ? ' <span class="ph">' + esc(r.phase) + "</span>" : "") + "</p>" +
      (r ? "<p>" + esc(r.reason) + "</p>" : "") + "<p>" + plural(on.length, "node") + planned +
      (on.length ? ": " + esc(names) : "") + "</p>" +
      (keys.length > 1 ? "<p>" + (keys.length - 1) + " more match: " + esc(keys.slice(1, 6).join(", ")) + "</p>" : "");
  }

  function find() {
    for (const c of hits) c.classList.remove("hit");
    hits = [];
    const q = search.value.trim().toLowerCase();
    if (!q) { mapEl.classList.remove("searching"); $("detail").hidden = true; body.dataset.hits = "0"; return; }
    const all = new Set([...rows.keys(), ...byGang.keys()]);
    let keys = Array.from(all).filter((k) => k.toLowerCase() === q);
    if (!keys.length) keys = Array.from(all).filter((k) => k.toLowerCase().includes(q)).sort();
    const lit = new Set();
    for (const k of keys) for (const i of cellsOf(k)) lit.add(i);
    for (const i of Array.from(lit).sort((a, b) => a - b)) { cells[i].classList.add("hit"); hits.push(cells[i]); }
    mapEl.classList.add("searching");
    body.dataset.hits = String(hits.length);
    showGang(keys);
    if (hits.length) hits[0].scrollIntoView({ block: "center", inline: "nearest" });
  }

  function showNode(i) {
    const n = nodes[i], det = $("detail");
    const held = n.holders.map((h) => esc(h.gang) + " (" + h.units + " " + esc(data.resource) + ", " + plural(h.pods, "pod") +
      ")").join("<br>");
    const state = !n.ready ? "not ready" : n.cordoned ? "cordoned" : n.avoided ? "avoided: " + n.avoided : "ready";
    const share = Object.entries(n.otherShare || {}).map(([r, s]) => (s < 0.005 ? "<1" : Math.round(s * 100)) + "% of " + r).join(", ");
    const others = n.otherPods ? "<p>" + plural(n.otherPods, "other pod") + (n.nodePods ? " (" + n.nodePods +
      " DaemonSet or static)" : "") + (share ? ": " + esc(share) : "") + (n.otherUse ? "" : ", the node left free") + "</p>" : "";
    det.hidden = false;
    det.innerHTML = "<p><b>" + esc(n.name) + "</b> · " + esc(paths[i].join(" › ")) + "</p><p>" + Math.max(n.free, 0) +
      " of " + n.allocatable + " " + esc(data.resource) + " free · " + esc(state) + "</p>" +
      (held ? "<p>" + held + "</p>" : "") + others +
      (n.reserved ? "<p>reserved for " + esc(n.reserved.join(", ")) + "</p>" : "") +
      (n.nominated ? "<p>nominated for " + esc(n.nominated.join(", ")) + "</p>" : "") +
      (n.held ? n.held.map((g) => '<p class="held">' + esc(heldFor(g)) + "</p>").join("") : "");
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

  // The address keeps the namespace and the search: #ns=<namespace>&gang=<query>.
  function remember() {
    const parts = [];
    if (namespace) parts.push("ns=" + encodeURIComponent(namespace));
    if (search.value) parts.push("gang=" + encodeURIComponent(search.value));
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : "#");
  }
  function setNamespace(ns) {
    namespace = ns;
    filterMap();
    if (data) drawLists(data);
    remember();
  }

  let typing = 0;
  search.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => { remember(); find(); }, 120); });
  nsEl.addEventListener("change", () => setNamespace(nsEl.value));
  mapEl.addEventListener("click", (e) => { const i = e.target.dataset && e.target.dataset.i; if (i !== undefined) showNode(+i); });
  // Hovering a cell outlines every cell of its gang (the namespace's colour is shared).
  mapEl.addEventListener("mouseover", (e) => {
    for (const c of peers) c.classList.remove("peer");
    peers = [];
    const i = e.target.dataset && e.target.dataset.i;
    if (i === undefined || mains[+i] === null) return;
    for (const j of byGang.get(mains[+i]) || []) { cells[j].classList.add("peer"); peers.push(cells[j]); }
  });
  $("side").addEventListener("click", (e) => {
    const li = e.target.closest("li[data-gang]");
    if (li) { search.value = li.dataset.gang; remember(); find(); }
  });
  // What the reader opens or closes is kept (a click on a summary; the lists' own redraws do not count).
  $("holding").addEventListener("click", (e) => {
    const summary = e.target.closest("summary");
    if (summary) opened.set(summary.parentElement.dataset.ns, !summary.parentElement.open);
  });
  // The reconciler's page answers a bearer token (docs/decisions/049): given in the address's
  // fragment (never sent to a server, nor logged), kept for this tab and taken out of the address.
  const given = /^#token=([^&]*)&?(.*)$/.exec(location.hash);
  if (given) {
    sessionStorage.setItem("troupe-map-bearer", given[1]);
    history.replaceState(null, "", given[2] ? "#" + given[2] : location.pathname + location.search);
  }
  const bearer = sessionStorage.getItem("troupe-map-bearer");
  // An address typed or pasted by hand may hold a lone '%': such a value is taken as it is.
  const decode = (v) => { try { return decodeURIComponent(v); } catch (e) { return v; } };
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq) === "gang") search.value = decode(part.slice(eq + 1));
    if (part.slice(0, eq) === "ns") namespace = decode(part.slice(eq + 1));
  }
  // For scripts and tests: read again now; find a gang as the search box does (returns the ms
  // it took); show one namespace ("" for all) as the filter does.
  window.troupeMap = {
    reload: () => { clearTimeout(timer); return load(); },
    find: (q) => { search.value = q; const t = performance.now(); find(); return performance.now() - t; },
    namespace: (ns) => setNamespace(ns),
  };
  load();
})();
