// Tenure dashboard: refreshes the live parts of a page (elements with data-poll) by fetching
// their server-rendered, escaped HTML. One request per element per data-every milliseconds,
// none while the tab is hidden or a request is in flight.
(function () {
  "use strict";
  document.querySelectorAll("[data-poll]").forEach(function (el) {
    var url = el.getAttribute("data-poll");
    var every = Math.max(1000, parseInt(el.getAttribute("data-every"), 10) || 5000);
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.removeAttribute("data-stale");
          el.setAttribute("data-refreshed", String(Date.now()));
        })
        .catch(function () { el.setAttribute("data-stale", "1"); })
        .finally(function () { busy = false; });
    }
    setInterval(tick, every);
  });
})();
