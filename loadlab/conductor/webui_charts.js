// loadlab: live charts and the live verdict beside the LLM tab's table (loadlab/conductor/webui.py).
// Plain SVG drawn here: the page loads nothing from outside the local server. Text from the run
// (the verdict) goes in as textContent, never as markup.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const W = 340, H = 150, PAD = { left: 44, right: 8, top: 8, bottom: 18 };
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];
  const CHARTS = [
    { title: "Output tokens/s", series: [["tokens_per_s", "tokens/s", 1]] },
    { title: "TTFT (ms)", series: [["ttft_p50", "p50", 1], ["ttft_p99", "p99", 1]] },
    { title: "ITL (ms)", series: [["itl_p50", "p50", 1], ["itl_p99", "p99", 1]] },
    { title: "Requests", series: [["in_flight", "in flight (client)", 1], ["running", "running (server)", 1],
                                  ["waiting", "waiting (server)", 1]] },
    { title: "KV cache usage (%)", series: [["kv_usage", "KV usage", 100]] },
  ];

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(v) {
    return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  function chart(spec, history) {
    const box = document.createElement("div");
    box.className = "loadlab-chart";
    const title = document.createElement("div");
    title.className = "loadlab-chart-title";
    title.textContent = spec.title;
    box.appendChild(title);
    const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
    const lines = spec.series.map(([key, label, scale]) => ({
      label, points: history.filter((p) => p[key] !== null && p[key] !== undefined).map((p) => [p.t, p[key] * scale]),
    }));
    const all = lines.flatMap((l) => l.points);
    if (all.length === 0) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "loadlab-empty" },
        spec.title.startsWith("KV") ? "not scraped (--loadlab-server-metrics)" : "no data yet"));
      box.appendChild(svg);
      return box;
    }
    const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
    const top = Math.max(...all.map((p) => p[1]), 1e-9);
    const x = (t) => PAD.left + (W - PAD.left - PAD.right) * (t - t0) / (t1 - t0);
    const y = (v) => H - PAD.bottom - (H - PAD.top - PAD.bottom) * v / top;
    svg.appendChild(el("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom, class: "loadlab-axis" }));
    svg.appendChild(el("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom, class: "loadlab-axis" }));
    svg.appendChild(el("text", { x: PAD.left - 4, y: PAD.top + 8, "text-anchor": "end" }, fmt(top)));
    svg.appendChild(el("text", { x: PAD.left - 4, y: H - PAD.bottom, "text-anchor": "end" }, "0"));
    svg.appendChild(el("text", { x: W - PAD.right, y: H - 4, "text-anchor": "end" }, `${Math.round(t1 - t0)} s`));
    const legend = document.createElement("div");
    legend.className = "loadlab-legend";
    lines.forEach((line, i) => {
      if (!line.points.length) return;
      const points = line.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      svg.appendChild(el("polyline", { points, class: "loadlab-line", stroke: COLORS[i], fill: "none" }));
      const last = line.points[line.points.length - 1][1];
      const item = document.createElement("span");
      item.style.color = COLORS[i];
      item.textContent = `${line.label} ${fmt(last)}`;
      legend.appendChild(item);
    });
    box.appendChild(svg);
    box.appendChild(legend);
    return box;
  }

  function panel() {
    // Beside our table, when the LLM tab shows it.
    const table = [...document.querySelectorAll("table")].find((t) => t.textContent.includes("TTFT (ms)"));
    if (!table) return null;
    let div = document.getElementById("loadlab-charts");
    if (!div) {
      div = document.createElement("div");
      div.id = "loadlab-charts";
      const host = table.parentElement;
      host.parentElement.insertBefore(div, host.nextSibling);
    }
    return div;
  }

  function draw(stats) {
    const div = panel();
    if (!div) return;
    const verdict = document.createElement("div");
    verdict.id = "loadlab-verdict";
    verdict.textContent = stats.verdict ? `Live verdict (last 30 s): ${stats.verdict}` : "Live verdict: after the first 5 s of a test";
    const grid = document.createElement("div");
    grid.className = "loadlab-grid";
    CHARTS.forEach((spec) => grid.appendChild(chart(spec, stats.history || [])));
    div.replaceChildren(verdict, grid);
  }

  async function refresh() {
    try {
      const response = await fetch("./loadlab/stats", { cache: "no-store" });
      if (response.ok) draw(await response.json());
    } catch (e) {
      // The run ended or the server is restarting: the next refresh tries again.
    }
  }

  const style = document.createElement("style");
  style.textContent = `
    #loadlab-charts { margin: 16px 0; font-family: sans-serif; font-size: 12px; }
    #loadlab-verdict { font-size: 15px; font-weight: bold; margin-bottom: 8px; }
    .loadlab-grid { display: flex; flex-wrap: wrap; gap: 12px; }
    .loadlab-chart-title { font-weight: bold; }
    .loadlab-chart svg text { font-size: 10px; fill: currentColor; }
    .loadlab-axis { stroke: #888; stroke-width: 1; }
    .loadlab-line { stroke-width: 1.5; }
    .loadlab-legend span { margin-right: 10px; }`;
  document.head.appendChild(style);
  refresh();
  setInterval(refresh, 2000);
})();
