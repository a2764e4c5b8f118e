// The console's script. Every page works without it: the slider is a form,
// the chart is drawn by the server, ids are plain selectable text. With it,
// moving the slider moves the chart's cursor and updates the figures in
// place, the chart reads out the entry under the pointer, and the copy
// buttons appear.
"use strict";

// wireCopy shows and wires the copy buttons under root.
const wireCopy = (root) => {
  for (const b of root.querySelectorAll("button.copy[data-copy]")) {
    if (b.dataset.wired) continue;
    b.dataset.wired = "true";
    b.hidden = false;
    b.addEventListener("click", async () => {
      const value = b.dataset.copy;
      try {
        await navigator.clipboard.writeText(value);
      } catch (e) {
        // No clipboard API (a page neither on HTTPS nor on localhost):
        // copy through a selection instead.
        const area = document.createElement("textarea");
        area.value = value;
        area.className = "visually-hidden";
        document.body.appendChild(area);
        area.select();
        try { document.execCommand("copy"); } finally { area.remove(); }
      }
      const text = b.firstChild; // "copy"; the rest is for screen readers
      text.nodeValue = "copied";
      setTimeout(() => { text.nodeValue = "copy"; }, 1500);
    });
  }
};

// scaleOf maps an entry number and a balance to the chart's coordinates,
// as chart.go's x and y do.
const scaleOf = (svg) => {
  const v = (k) => parseFloat(svg.dataset[k]);
  const n = v("entries"), split = v("split"), l = v("l"), s = v("s"), r = v("r");
  const top = v("top"), bottom = v("bottom"), lo = v("lo"), hi = v("hi");
  return {
    x(seq) {
      if (n === 0) return l;
      if (split === 0) return l + seq / n * (r - l);
      if (seq <= split) return l + seq / split * (s - l);
      return s + (seq - split) / (n - split) * (r - s);
    },
    y(balance) { return top + (hi - balance) / (hi - lo) * (bottom - top); },
  };
};

// wireChart makes the chart read out the column or point nearest the
// pointer. It returns the function that moves the cursor.
const wireChart = (svg) => {
  const scale = scaleOf(svg);
  const cursor = document.getElementById("chart-cursor");
  const dot = document.getElementById("chart-cursor-dot");
  const hoverLine = document.getElementById("chart-hover");
  const readout = document.getElementById("chart-readout");
  const items = [...svg.querySelectorAll("[data-x][data-label]")]
    .map((el) => ({ x: parseFloat(el.dataset.x), label: el.dataset.label }))
    .sort((a, b) => a.x - b.x);

  svg.addEventListener("pointermove", (ev) => {
    if (items.length === 0) return;
    const p = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(svg.getScreenCTM().inverse());
    let lo = 0, hi = items.length - 1;
    while (lo < hi) { // the first item at or right of the pointer
      const mid = (lo + hi) >> 1;
      if (items[mid].x < p.x) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && p.x - items[lo - 1].x < items[lo].x - p.x) lo--;
    const it = items[lo];
    hoverLine.setAttribute("x1", it.x);
    hoverLine.setAttribute("x2", it.x);
    hoverLine.setAttribute("visibility", "visible");
    readout.textContent = it.label;
  });
  svg.addEventListener("pointerleave", () => hoverLine.setAttribute("visibility", "hidden"));

  // The dot waits for the balance, which only the ledger's answer gives.
  return (seq, balance) => {
    const x = scale.x(seq);
    cursor.setAttribute("x1", x);
    cursor.setAttribute("x2", x);
    cursor.dataset.seq = seq;
    dot.setAttribute("cx", x);
    if (balance === undefined) {
      dot.setAttribute("visibility", "hidden");
      return;
    }
    dot.setAttribute("cy", scale.y(balance));
    dot.setAttribute("visibility", "visible");
  };
};

// wireSlider makes the time slider move the cursor as it moves, and fetch
// the ledger's answer for the moment when it stops.
const wireSlider = (form, moveCursor) => {
  const slider = form.querySelector("input[type=range]");
  const label = document.getElementById("moment-label");
  let latest = 0;

  const relabel = () => {
    const seq = Number(slider.value);
    const text = seq === 0 ? "before the first entry"
      : "after entry " + seq.toLocaleString("en") + " of " + Number(slider.max).toLocaleString("en");
    label.textContent = text;
    slider.setAttribute("aria-valuetext", text);
    moveCursor(seq);
  };

  const load = async () => {
    relabel();
    const mine = ++latest;
    const params = new URLSearchParams(new FormData(form));
    const pageURL = form.action + "?" + params.toString();
    params.set("partial", "1");
    const figures = document.getElementById("as-of-figures");
    figures.setAttribute("aria-busy", "true");
    try {
      const resp = await fetch(form.action + "?" + params.toString(), { credentials: "same-origin" });
      if (!resp.ok) { form.submit(); return; }
      const html = await resp.text();
      if (mine !== latest) return; // a newer move is on its way
      const parts = document.createElement("template");
      parts.innerHTML = html;
      for (const id of ["as-of-figures", "as-of-entries"]) {
        const fresh = parts.content.getElementById(id);
        if (fresh) document.getElementById(id).replaceWith(fresh);
      }
      wireCopy(document);
      // The answer says where the cursor stands: entries recorded in one
      // microsecond are one moment.
      const got = document.getElementById("as-of-figures").dataset;
      slider.value = got.seq;
      label.textContent = got.label;
      slider.setAttribute("aria-valuetext", got.label);
      moveCursor(Number(got.seq), Number(got.balance));
      history.replaceState(null, "", pageURL);
      form.dataset.loaded = got.seq;
    } catch (e) {
      form.submit(); // fall back to the plain form
    } finally {
      if (mine === latest) document.getElementById("as-of-figures")?.removeAttribute("aria-busy");
    }
  };

  slider.addEventListener("input", relabel);
  slider.addEventListener("change", load);
  form.dataset.enhanced = "true";
};

document.addEventListener("DOMContentLoaded", () => {
  wireCopy(document);
  const svg = document.getElementById("balance-chart");
  const moveCursor = svg ? wireChart(svg) : () => {};
  const form = document.getElementById("time-travel");
  if (form) wireSlider(form, moveCursor);
});
