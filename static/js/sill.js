// Small progressive enhancements; every page works without this file. Templates carry no inline
// scripts or handlers (the Content-Security-Policy has no 'unsafe-inline'): behaviour hangs off
// data- attributes handled here.
document.documentElement.classList.add("js");

document.addEventListener("DOMContentLoaded", () => {
  // htmx: the one place that says which error answers swap in. 422 is a form re-rendered with
  // its errors (CONVENTIONS.md); 403 and 409 answer a refused held-refund decision with the row
  // or panel as it stands now; 413 and 400 are a form Django refused to read (too large, too
  // many fields: templates/form_refused.html), which takes the form's place and says nothing
  // was changed; 503 is Sill briefly unavailable (its cache down: templates/503.html), which
  // takes the form's place the same way. Other error answers keep htmx's default: no swap.
  const SWAPPED_ERRORS = [422, 403, 409, 413, 400, 503];
  document.body.addEventListener("htmx:beforeSwap", (e) => {
    if (SWAPPED_ERRORS.includes(e.detail.xhr.status)) { e.detail.shouldSwap = true; e.detail.isError = false; }
  });
  // What was swapped in place of the focused form (a refusal page) takes the focus, once:
  // the submit button that had it is gone, and focus would fall back to the page's top.
  document.body.addEventListener("htmx:afterSettle", () => {
    const el = document.querySelector("[data-focus-when-swapped]");
    if (el) { el.removeAttribute("data-focus-when-swapped"); el.focus(); }
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

  // Confirmation: <form data-confirm="sentence" data-confirm-button="Refund $89.00">.
  // The submit is held back and a modal <dialog> asks (showModal() makes the rest of the page
  // inert, so focus stays inside; Escape cancels). On confirm the form gets
  // <input type=hidden name=confirmed value=1> (once) and is submitted again with
  // requestSubmit(submitter), so htmx forms still go through htmx and the pressed button's
  // name/value is still sent. On cancel nothing is sent. Without this file the form posts
  // without confirmed=1 and the server answers with its own confirmation page.
  let dialog = null;
  const confirmDialog = () => {
    if (dialog) return dialog;
    dialog = document.createElement("dialog");
    dialog.className = "confirm-dialog";
    dialog.setAttribute("aria-labelledby", "confirm-dialog-title");
    dialog.setAttribute("aria-describedby", "confirm-dialog-message");
    // Pico's modal shape: <dialog> is the overlay, its <article> the box.
    dialog.innerHTML =
      '<article><h2 id="confirm-dialog-title">Please confirm</h2>' +
      '<p id="confirm-dialog-message"></p>' +
      '<footer class="confirm-actions">' +
      '<button type="button" class="secondary outline" data-confirm-cancel>Cancel</button>' +
      '<button type="button" data-confirm-ok>Confirm</button></footer></article>';
    document.body.appendChild(dialog);
    return dialog;
  };
  const passing = new WeakSet();
  const askThenSubmit = (form, submitter) => {
    const d = confirmDialog();
    d.querySelector("#confirm-dialog-message").textContent = form.dataset.confirm;
    const ok = d.querySelector("[data-confirm-ok]");
    const cancel = d.querySelector("[data-confirm-cancel]");
    ok.textContent = form.dataset.confirmButton || "Confirm";
    const danger = form.dataset.confirmTone === "danger";
    ok.classList.toggle("danger", danger);
    const finish = (confirmed) => {
      ok.onclick = cancel.onclick = d.oncancel = null;
      d.close();
      if (!confirmed) { if (submitter && submitter.isConnected) submitter.focus(); return; }
      if (!form.querySelector('input[type="hidden"][name="confirmed"]')) {
        const input = document.createElement("input");
        input.type = "hidden"; input.name = "confirmed"; input.value = "1";
        form.appendChild(input);
      }
      passing.add(form);
      if (submitter && submitter.form === form && submitter.isConnected) form.requestSubmit(submitter);
      else form.requestSubmit();
      // requestSubmit fires "submit" synchronously; if validation stopped it, the next submit
      // must still ask.
      passing.delete(form);
    };
    ok.onclick = () => finish(true);
    cancel.onclick = () => finish(false);
    d.oncancel = (ev) => { ev.preventDefault(); finish(false); };
    d.showModal();
    cancel.focus();
  };
  document.body.addEventListener("submit", (e) => {
    const form = e.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (passing.has(form)) { passing.delete(form); return; }
    // Capture phase on <body>: runs before htmx's listener on the form, which never sees it.
    e.preventDefault(); e.stopImmediatePropagation();
    askThenSubmit(form, e.submitter);
  }, true);

  // Copy buttons: <button data-copy="full value"> (templates/_copy_id.html). Announces "Copied"
  // in the button's polite status region.
  document.querySelectorAll("[data-copy][hidden]").forEach((b) => { b.hidden = false; });
  document.body.addEventListener("htmx:afterSettle", () => {
    document.querySelectorAll("[data-copy][hidden]").forEach((b) => { b.hidden = false; });
  });
  document.body.addEventListener("click", (e) => {
    const button = e.target.closest && e.target.closest("[data-copy]");
    if (!button) return;
    const status = button.parentElement.querySelector("[data-copy-status]");
    const say = (text) => {
      if (!status) return;
      status.textContent = text;
      clearTimeout(button._sillTimer);
      button._sillTimer = setTimeout(() => { status.textContent = ""; }, 2000);
    };
    if (!navigator.clipboard) { say("Copy not available: select the id"); return; }
    navigator.clipboard.writeText(button.dataset.copy).then(() => say("Copied"), () => say("Copy failed"));
  });

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

  // Phone tables: every <td> of a table.data gets its column's <th> text as data-label (unless
  // set), which the stacked-card CSS shows before the value below 640 px.
  const labelCells = (root) => {
    root.querySelectorAll("table.data").forEach((table) => {
      const heads = Array.from(table.querySelectorAll("thead th")).map((th) => th.textContent.trim());
      if (!heads.length) return;
      table.querySelectorAll("tbody tr").forEach((tr) => {
        let col = 0;
        Array.from(tr.children).forEach((cell) => {
          if (cell.tagName === "TD" && !cell.hasAttribute("data-label") && heads[col]) cell.dataset.label = heads[col];
          col += cell.colSpan || 1;
        });
      });
    });
  };
  // A .table-wrap that scrolls must be reachable by keyboard: templates mark theirs
  // (tabindex="0" role="region" aria-label); this covers any that do not.
  const reachableScroll = () => {
    document.querySelectorAll(".table-wrap:not([tabindex])").forEach((wrap) => {
      if (wrap.scrollWidth <= wrap.clientWidth) return;
      const caption = wrap.querySelector("caption");
      wrap.tabIndex = 0;
      wrap.setAttribute("role", "region");
      if (!wrap.hasAttribute("aria-label")) wrap.setAttribute("aria-label", caption ? caption.textContent.trim() : "Table");
    });
  };
  labelCells(document); reachableScroll();
  document.body.addEventListener("htmx:afterSettle", () => { labelCells(document); reachableScroll(); });

  // <span data-mirror="held-count"> repeats #held-count (the Held badge, refreshed out of band
  // by htmx) on the phone's Menu button, where the nav itself is folded away.
  const mirror = () => {
    document.querySelectorAll("[data-mirror]").forEach((copy) => {
      const source = document.getElementById(copy.dataset.mirror);
      if (!source) return;
      copy.textContent = source.textContent;
      copy.hidden = source.hidden;
    });
  };
  document.body.addEventListener("htmx:afterSettle", mirror);
  document.body.addEventListener("htmx:oobAfterSwap", mirror);

  // The collapsing top nav: <button data-menu-toggle aria-controls="site-menu" aria-expanded>.
  // Without this file the menu button stays hidden and the nav wraps.
  document.querySelectorAll("[data-menu-toggle]").forEach((button) => {
    const menu = document.getElementById(button.getAttribute("aria-controls"));
    if (!menu) return;
    button.hidden = false;
    menu.classList.add("collapsible");
    button.addEventListener("click", () => {
      const open = button.getAttribute("aria-expanded") !== "true";
      button.setAttribute("aria-expanded", String(open));
      menu.classList.toggle("open", open);
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && button.getAttribute("aria-expanded") === "true") {
        button.setAttribute("aria-expanded", "false"); menu.classList.remove("open"); button.focus();
      }
    });
  });
});
