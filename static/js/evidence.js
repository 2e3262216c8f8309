// The evidence viewer's small enhancements; every page works without them.
//  - A line's panel opens right under the line that asked for it: before htmx swaps #line-panel,
//    the element is moved after that line, so the swap happens in place.
//  - The selected line is marked (aria-current, .is-selected) once the panel has arrived.
//  - A page opened at #L<n> without ?line= (a bare anchor) opens that line's panel.
(function () {
  "use strict";

  function lineOf(el) {
    return el && el.closest ? el.closest(".src-line") : null;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var line = lineOf(event.detail.elt);
    var panel = document.getElementById("line-panel");
    if (line && panel && event.detail.target === panel) {
      line.after(panel);
    }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    var line = lineOf(event.detail.requestConfig && event.detail.requestConfig.elt);
    if (!line) {
      return;
    }
    document.querySelectorAll(".src-line.is-selected").forEach(function (el) {
      el.classList.remove("is-selected");
      var link = el.querySelector("a.src-code");
      if (link) {
        link.removeAttribute("aria-current");
      }
    });
    line.classList.add("is-selected");
    var link = line.querySelector("a.src-code");
    if (link) {
      link.setAttribute("aria-current", "true");
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var match = /^#L(\d+)$/.exec(window.location.hash);
    if (!match || document.querySelector("section#line-panel") || !window.htmx) {
      return;
    }
    var line = document.getElementById("L" + match[1]);
    var link = line && line.querySelector("a.src-code[hx-get]");
    if (link) {
      window.htmx.trigger(link, "click");
    }
  });
})();
