// Server-rendered timelines: fit the chart to its card, and zoom: drag across the chart to
// load that time span.
// The server draws the zoomed window (it queries only that window); without
// JavaScript the window picker and the zoom links do the same.
(function () {
  function svgX(svg, evt) {
    var r = svg.getBoundingClientRect();
    return (evt.clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
  }
  function timeAt(svg, x) {
    var t0 = parseFloat(svg.dataset.t0), t1 = parseFloat(svg.dataset.t1);
    var l = parseFloat(svg.dataset.left), r = parseFloat(svg.dataset.right);
    var f = Math.min(1, Math.max(0, (x - l) / (r - l)));
    return t0 + f * (t1 - t0);
  }
  function iso(t) { return new Date(t * 1000).toISOString().slice(0, 19); }

  // Fit the chart to its card: the server draws it as many units wide as the card is CSS px
  // (within data-min-width..data-max-width), so it fills the card with its text at the drawn
  // size. The card's width is kept in a cookie, so the next chart is drawn to fit at once;
  // a chart drawn at another width (the first visit, a resized window) is fetched again at
  // this one, as its htmx partial. Without JavaScript the CSS scales the default drawing.
  var asked = null;
  function fit() {
    var svg = document.querySelector(".timeline-scroll svg.timeline");
    if (!svg || !window.htmx) return;
    var card = Math.floor(svg.parentNode.clientWidth);
    if (!card) return;
    document.cookie = "gantt_width=" + card + "; path=/; max-age=31536000; SameSite=Lax";
    var lo = parseFloat(svg.dataset.minWidth), hi = parseFloat(svg.dataset.maxWidth);
    var want = Math.max(lo, Math.min(hi, card));
    var drawn = svg.viewBox.baseVal.width;
    if ((Math.abs(want - drawn) <= 1 && svg.classList.contains("fitted")) || want === asked) {
      return;
    }
    asked = want;  // asked once per width: a server that draws another never loops us
    var url = new URL(window.location.href);
    url.searchParams.set("width", want);
    htmx.ajax("GET", url.pathname + url.search, { target: "#timeline-chart", swap: "outerHTML" });
  }
  var pending = null;
  function fitSoon() { clearTimeout(pending); pending = setTimeout(fit, 150); }
  document.addEventListener("DOMContentLoaded", function () {
    var chart = document.getElementById("timeline-chart");
    if (!chart) return;
    fit();
    // the card's width changes with the window (and with a page scrollbar coming or going)
    if (window.ResizeObserver) new ResizeObserver(fitSoon).observe(chart.parentNode);
    else window.addEventListener("resize", fitSoon);
  });
  var drag = null;
  document.addEventListener("mousedown", function (e) {
    var svg = e.target.closest && e.target.closest("svg.timeline");
    if (!svg || e.button !== 0) return;
    var x = svgX(svg, e);
    var band = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    band.setAttribute("class", "zoom-band");
    band.setAttribute("y", 0); band.setAttribute("height", svg.viewBox.baseVal.height);
    band.setAttribute("x", x); band.setAttribute("width", 0);
    svg.appendChild(band);
    drag = { svg: svg, x0: x, band: band };
    e.preventDefault();
  });
  document.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var x = svgX(drag.svg, e);
    drag.band.setAttribute("x", Math.min(x, drag.x0));
    drag.band.setAttribute("width", Math.abs(x - drag.x0));
  });
  document.addEventListener("mouseup", function (e) {
    if (!drag) return;
    var d = drag; drag = null;
    var x = svgX(d.svg, e);
    d.band.remove();
    if (Math.abs(x - d.x0) < 4) return;  // a click, not a drag
    var a = timeAt(d.svg, Math.min(x, d.x0)), b = timeAt(d.svg, Math.max(x, d.x0));
    var url = new URL(window.location.href);
    url.searchParams.set("start", iso(a));
    url.searchParams.set("end", iso(Math.max(b, a + 1)));
    window.location.href = url.toString();
  });
})();
