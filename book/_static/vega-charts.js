// Draws the book's interactive charts: every <div class="vega-chart"> holds a Vega-Lite
// specification in a <script type="application/json"> (tools/sphinx_ext/vega_charts.py writes them),
// drawn with the Vega, Vega-Lite and Vega-Embed copies in _static/vega/, with no network.
// Each container gets data-vega-state="drawn" once its chart is drawn, or "failed" and a message.
(function () {
  "use strict";

  function fail(container, message) {
    container.dataset.vegaState = "failed";
    const note = document.createElement("p");
    note.className = "vega-chart-error";
    note.textContent = "This interactive chart could not be drawn: " + message;
    container.appendChild(note);
    console.error("vega-charts:", message);
  }

  function draw(container) {
    const source = container.querySelector("script.vega-chart-spec");
    if (typeof vegaEmbed !== "function") {
      fail(container, "Vega-Embed did not load (_static/vega/vega-embed.min.js).");
      return;
    }
    let spec;
    try {
      spec = JSON.parse(source.textContent);
    } catch (error) {
      fail(container, "its specification is not JSON (" + error + ").");
      return;
    }
    const target = document.createElement("div");
    container.appendChild(target);
    vegaEmbed(target, spec, { actions: false, renderer: "svg" })
      .then((result) => {
        container.vegaView = result.view;
        container.dataset.vegaState = "drawn";
      })
      .catch((error) => fail(container, String(error)));
  }

  function drawAll() {
    document.querySelectorAll("div.vega-chart").forEach(draw);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
