// Small progressive enhancement only: tooltips for SVG charts (elements with data-tip).
(function () {
  function tip() {
    var t = document.getElementById("tooltip");
    if (!t) { t = document.createElement("div"); t.id = "tooltip"; document.body.appendChild(t); }
    return t;
  }
  document.addEventListener("mousemove", function (e) {
    var el = e.target.closest ? e.target.closest("[data-tip]") : null;
    var t = tip();
    if (!el) { t.style.display = "none"; return; }
    t.textContent = el.getAttribute("data-tip");
    t.style.display = "block";
    t.style.left = (e.clientX + 12) + "px";
    t.style.top = (e.clientY + 12) + "px";
  });
})();

// Forms with data-confirm ask before they submit (no inline handlers: the CSP forbids them).
document.addEventListener("submit", function (e) {
  var form = e.target;
  var question = form && form.getAttribute ? form.getAttribute("data-confirm") : null;
  if (question && !window.confirm(question)) { e.preventDefault(); }
}, true);

// A table wider than the screen (a phone) says so under it: "scroll sideways" (the CSS
// shows the cue, and an edge shadow, only on narrow screens).
(function () {
  function mark() {
    var tables = document.querySelectorAll("main table");
    for (var i = 0; i < tables.length; i++) {
      var table = tables[i];
      var wide = table.scrollWidth > table.clientWidth + 1;
      table.classList.toggle("scrolls", wide);
      var next = table.nextElementSibling;
      if (wide && !(next && next.classList.contains("scroll-cue"))) {
        var cue = document.createElement("p");
        cue.className = "scroll-cue";
        cue.textContent = "Scroll the table sideways for more columns →";
        table.parentNode.insertBefore(cue, table.nextSibling);
      }
    }
  }
  document.addEventListener("DOMContentLoaded", mark);
  window.addEventListener("resize", mark);
  document.addEventListener("htmx:afterSettle", mark);
})();
