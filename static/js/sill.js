// Small progressive enhancements; every page works without this file. Templates carry no inline
// scripts or handlers (a Content-Security-Policy without 'unsafe-inline' is coming): behaviour
// hangs off data- attributes handled here.
document.addEventListener("DOMContentLoaded", () => {
  // htmx: the one place that says which error answers swap in. 422 is a form re-rendered with
  // its errors (CONVENTIONS.md); 403 and 409 answer a refused held-refund decision with the row
  // or panel as it stands now. Other error answers keep htmx's default: no swap.
  const SWAPPED_ERRORS = [422, 403, 409];
  document.body.addEventListener("htmx:beforeSwap", (e) => {
    if (SWAPPED_ERRORS.includes(e.detail.xhr.status)) { e.detail.shouldSwap = true; e.detail.isError = false; }
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
  // <select data-autosubmit> submits its form on change (the site switcher, the activity
  // filter); each has a submit button for when this file does not run.
  document.body.addEventListener("change", (e) => {
    if (e.target.matches("select[data-autosubmit]")) e.target.form.submit();
  });
  // Typing in an amount or percentage box picks its refund type: <input data-refund-kind="amount">.
  // Delegated, so it keeps working after htmx swaps the refund panel.
  document.body.addEventListener("input", (e) => {
    const kind = e.target.dataset && e.target.dataset.refundKind;
    if (kind) e.target.form.elements.kind.value = kind;
  });
});
