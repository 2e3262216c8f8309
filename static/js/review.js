/* kernelopt's own script (the Content-Security-Policy allows no inline code): things that
   only hold when JavaScript runs. Every page works without it. */
(function () {
  "use strict";

  // "Updating every 2 s" is true only when htmx is here to poll: say it from here, never
  // from the server's HTML, which a browser without JavaScript also gets.
  function notePolling(root) {
    if (typeof window.htmx === "undefined") return;
    root.querySelectorAll("[data-poll-note]").forEach(function (el) {
      var every = el.getAttribute("data-poll-note") || "2 s";
      el.textContent = "Updating every " + every + " · ";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    notePolling(document);
  });
  // fragments swapped in by a poll carry a fresh, empty note
  document.addEventListener("htmx:load", function (event) {
    notePolling(event.target.parentNode || document);
  });
})();
