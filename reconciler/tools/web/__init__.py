"""The topology map in a browser: the page's data (:mod:`.data`), the page itself (plain
HTML, CSS and a little script in ``static/``) and its server (:mod:`.server`), mounted by
the reconciler on its metrics port and served by ``kubectl troupe topology --web``
(:mod:`.local`); docs/decisions/042-topology-map.md."""
