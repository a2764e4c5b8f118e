// The time slider, enhanced: moving it updates the balance and entries in
// place. Without this script the slider is an ordinary form.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("time-travel");
  if (!form) return;
  const slider = form.querySelector("input[type=range]");
  const label = document.getElementById("moment-label");
  const view = document.getElementById("as-of-view");
  const times = JSON.parse(slider.dataset.times || "{}");
  let latest = 0;

  const relabel = () => {
    const text = times[slider.value] || "";
    label.textContent = text;
    slider.setAttribute("aria-valuetext", text);
  };

  const load = async () => {
    relabel();
    const mine = ++latest;
    const params = new URLSearchParams(new FormData(form));
    const pageURL = form.action + "?" + params.toString();
    params.set("partial", "1");
    view.setAttribute("aria-busy", "true");
    try {
      const resp = await fetch(form.action + "?" + params.toString(), { credentials: "same-origin" });
      if (!resp.ok) { form.submit(); return; }
      const html = await resp.text();
      if (mine !== latest) return; // a newer move is on its way
      view.innerHTML = html;
      history.replaceState(null, "", pageURL);
      form.dataset.loaded = slider.value;
    } catch (e) {
      form.submit(); // fall back to the plain form
    } finally {
      if (mine === latest) view.removeAttribute("aria-busy");
    }
  };

  slider.addEventListener("input", relabel);
  slider.addEventListener("change", load);
  form.dataset.enhanced = "true";
});
