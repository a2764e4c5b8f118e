// Copy buttons beside ids: shown only when this script runs, since
// without it they could do nothing (the id is in the element's title and
// can be selected).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  if (!navigator.clipboard) return;
  for (const button of document.querySelectorAll("button.copy[data-copy]")) {
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(button.dataset.copy);
        button.dataset.copied = "true";
        button.firstChild.textContent = "Copied";
      } catch (e) {
        button.firstChild.textContent = "Select to copy";
      }
    });
  }
});
