// The console's only script: when the server says the pending list
// changed (server-sent events), fetch the page again and swap in its
// list. The fetched page is parsed, never executed; without this script
// the page works by reloading.
"use strict";
(function () {
  var list = document.getElementById("pending");
  if (!list || !window.EventSource || !window.fetch) {
    return;
  }
  var events = new EventSource(list.getAttribute("data-events"));
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("pending");
        var cur = document.getElementById("pending");
        if (fresh && cur) {
          cur.replaceWith(document.importNode(fresh, true));
        }
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  events.addEventListener("pending", refresh);
  // A change made before the stream opened sent no event: fetch once
  // the stream is open, then mark the page live.
  events.addEventListener("open", function () {
    refresh();
    document.documentElement.setAttribute("data-live", "open");
  });
})();
