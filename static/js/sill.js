// Small progressive enhancements; every page works without this file.
document.addEventListener("DOMContentLoaded", () => {
  // htmx: let 422 responses (form errors) swap in, as CONVENTIONS.md asks.
  document.body.addEventListener("htmx:beforeSwap", (e) => {
    if (e.detail.xhr.status === 422) { e.detail.shouldSwap = true; e.detail.isError = false; }
  });
  // Countdown badges: <span data-countdown="ISO8601">.
  const tick = () => {
    document.querySelectorAll("[data-countdown]").forEach((el) => {
      const ms = new Date(el.dataset.countdown) - new Date();
      if (ms <= 0) { el.textContent = "expired"; el.classList.add("expired"); return; }
      const h = Math.floor(ms / 3600000), m = Math.floor((ms % 3600000) / 60000), s = Math.floor((ms % 60000) / 1000);
      el.textContent = `${h}h ${String(m).padStart(2, "0")}m ${String(s).padStart(2, "0")}s left`;
    });
  };
  tick(); setInterval(tick, 1000);
  // Confirmation on destructive actions: <form data-confirm="...">.
  document.body.addEventListener("submit", (e) => {
    const msg = e.target.dataset && e.target.dataset.confirm;
    if (msg && !window.confirm(msg)) { e.preventDefault(); e.stopImmediatePropagation(); }
  }, true);
});
