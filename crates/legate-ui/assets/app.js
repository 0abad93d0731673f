// Legate's dashboard: live updates and countdowns. Everything else works without it.
// The server sends HTML fragments it rendered and escaped itself; this script only places
// them. It never builds HTML from strings of its own.
"use strict";

function status(root, text) {
  const el = root.querySelector("[data-live-status]");
  if (el) el.textContent = text;
}

// A task's event list: appends each event once, in order; EventSource resumes with
// Last-Event-ID after a dropped connection or a server restart.
function followEvents(list) {
  const url = list.dataset.stream;
  if (!url) return;
  const section = list.closest("section") || document;
  const source = new EventSource(url);
  let last = Number(list.dataset.lastSeq || "0");
  source.addEventListener("open", () => status(section, "Live."));
  source.addEventListener("error", () => status(section, "Reconnecting…"));
  source.addEventListener("event", (m) => {
    const seq = Number(m.lastEventId);
    if (seq <= last) return;
    last = seq;
    list.dataset.lastSeq = String(seq);
    list.insertAdjacentHTML("beforeend", m.data);
  });
  source.addEventListener("end", () => {
    source.close();
    status(section, "The task has ended.");
  });
  source.addEventListener("failure", (m) => {
    source.close();
    status(section, "The stream stopped.");
  });
}

// A region the server re-renders whole (the pending approvals, the newest tasks), on the
// event named by data-replace-event.
function followReplace(region) {
  const url = region.dataset.replaceStream;
  const section = region.closest("section") || document;
  const source = new EventSource(url);
  source.addEventListener("open", () => status(section, "Live."));
  source.addEventListener("error", () => status(section, "Reconnecting…"));
  source.addEventListener(region.dataset.replaceEvent || "replace", (m) => {
    // Keep the keyboard focus on the same button when the list is redrawn.
    const focused = document.activeElement;
    const form = focused && focused.closest ? focused.closest("li[id]") : null;
    const keep = form && region.contains(form) ? [form.id, focused.value] : null;
    region.innerHTML = m.data;
    tick();
    if (keep) {
      const again = document.getElementById(keep[0]);
      const button = again && again.querySelector('button[value="' + CSS.escape(keep[1]) + '"]');
      if (button) button.focus();
    }
  });
}

// Countdowns to approval deadlines (a local clock; nothing is fetched).
function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll("[data-deadline]")) {
    const left = Math.max(0, Math.round((Number(el.dataset.deadline) - now) / 1000));
    el.textContent = left + " s";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const list of document.querySelectorAll("[data-stream]")) followEvents(list);
  for (const region of document.querySelectorAll("[data-replace-stream]")) followReplace(region);
  tick();
  setInterval(tick, 1000);
});
