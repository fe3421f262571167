// ajet-runner web console: live updates over server-sent events, log follow, copy, confirmations.
// Plain JS, no dependencies. Server fragments are rendered and escaped by the server; untrusted text
// that this script adds itself (log lines) only ever goes through textContent.
"use strict";

function debounce(fn, ms) {
  let timer = null;
  return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

async function fetchText(url) {
  const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (resp.status === 401) { window.location.reload(); throw new Error("logged out"); }
  if (!resp.ok) throw new Error(url + ": " + resp.status);
  return resp.text();
}

// Confirmations for stop and delete; copy buttons.
document.addEventListener("submit", function (ev) {
  const msg = ev.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) ev.preventDefault();
});
document.addEventListener("click", function (ev) {
  const btn = ev.target.closest("[data-copy]");
  if (!btn) return;
  const input = document.getElementById(btn.getAttribute("data-copy"));
  input.select();
  const done = function () { btn.textContent = "Copied"; setTimeout(function () { btn.textContent = "Copy"; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(input.value).then(done, done);
  else { document.execCommand("copy"); done(); }
});

function liveStatus(text) {
  document.querySelectorAll(".live-status").forEach(function (el) { el.textContent = text; });
}

// Experiments table: refresh the table (with the current filters) whenever any experiment publishes an event.
(function () {
  const box = document.getElementById("exp-table");
  if (!box) return;
  const refresh = debounce(async function () {
    try { box.innerHTML = await fetchText("/ui/fragments/experiments" + window.location.search); } catch (e) { /* next event retries */ }
  }, 250);
  const source = new EventSource("/ui/stream?after=" + encodeURIComponent(box.getAttribute("data-after")));
  source.onmessage = refresh;
  source.onopen = function () { liveStatus("live"); };
  source.onerror = function () { liveStatus("reconnecting…"); };
  setInterval(refresh, 30000); // elapsed times tick
})();

// One experiment: refresh its parts on each of its events; the stream ends after `finished`.
(function () {
  const root = document.getElementById("exp");
  if (!root) return;
  const id = root.getAttribute("data-id");
  const base = "/ui/experiments/" + encodeURIComponent(id);
  let finished = document.getElementById("exp-state").textContent.trim() === "finished";
  const refresh = debounce(async function () {
    try {
      const resp = await fetch(base + "/parts", { credentials: "same-origin" });
      if (!resp.ok) return;
      const parts = await resp.json();
      Object.keys(parts).forEach(function (name) {
        const el = document.getElementById("part-" + name);
        if (el) el.innerHTML = parts[name];
      });
      finished = document.getElementById("exp-state").textContent.trim() === "finished";
    } catch (e) { /* the next event retries */ }
  }, 200);
  if (!finished) {
    const source = new EventSource(base + "/stream?after=" + encodeURIComponent(root.getAttribute("data-after")));
    source.onmessage = function (ev) {
      const msg = JSON.parse(ev.data);
      if (msg.type === "end") source.close();
      refresh();
    };
    const tick = setInterval(function () { if (finished) clearInterval(tick); else refresh(); }, 10000);
  }

  // The log: the last lines, then what is appended (whole lines), while "follow" is on.
  const pane = document.getElementById("log-pane");
  const follow = document.getElementById("log-follow");
  const search = document.getElementById("log-search");
  const info = document.getElementById("log-info");
  let offset = null;
  let busy = false;
  function matches(line) {
    const q = search.value.trim().toLowerCase();
    return !q || line.toLowerCase().indexOf(q) !== -1;
  }
  function addLines(text, replace) {
    if (replace) pane.textContent = "";
    if (!text) return;
    const frag = document.createDocumentFragment();
    text.replace(/\n$/, "").split("\n").forEach(function (line) {
      const div = document.createElement("div");
      div.textContent = line;
      if (!matches(line)) div.hidden = true;
      frag.appendChild(div);
    });
    pane.appendChild(frag);
    if (follow.checked) pane.scrollTop = pane.scrollHeight;
  }
  async function poll(first) {
    if (busy) return;
    busy = true;
    try {
      const url = pane.getAttribute("data-url") + (offset === null ? "?tail=500" : "?since=" + offset);
      const resp = await fetch(url, { credentials: "same-origin" });
      if (resp.ok) {
        const body = await resp.json();
        addLines(body.text, first || body.offset === null);
        offset = body.offset;
        info.textContent = body.source === "file" ? "from the log file" : "from the tail kept in Redis";
        if (body.state === "finished" && !first) follow.checked = false;
      }
    } catch (e) { /* retried on the next tick */ }
    busy = false;
  }
  poll(true);
  setInterval(function () { if (follow.checked) poll(false); }, 1000);
  search.addEventListener("input", function () {
    pane.querySelectorAll("div").forEach(function (div) { div.hidden = !matches(div.textContent); });
  });
})();

// Nodes: no events for heartbeats, so poll.
(function () {
  const box = document.getElementById("nodes");
  if (!box) return;
  setInterval(async function () {
    try { box.innerHTML = await fetchText("/ui/fragments/nodes"); } catch (e) { /* retried */ }
  }, 5000);
})();

// Submit: a chosen file fills the text area (the form posts text, nothing is uploaded elsewhere).
(function () {
  const file = document.getElementById("blueprint-file");
  if (!file) return;
  file.addEventListener("change", function () {
    const f = file.files[0];
    if (!f) return;
    const reader = new FileReader();
    reader.onload = function () {
      document.getElementById("blueprint").value = reader.result;
      const submit = document.getElementById("submit-button");
      if (submit) submit.disabled = true; // check the new text first
    };
    reader.readAsText(f);
  });
})();

// Column sorting: a click on a heading of any table.sortable sorts its rows by that column (again: reverse).
// A cell's data-sort is its sort key when given (numbers, raw seconds), else its text; headings marked
// data-type="number" compare as numbers, empty cells last.
(function () {
  function key(row, index) {
    const cell = row.children[index];
    if (!cell) return "";
    return cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
  }
  function sortBy(table, th) {
    const index = Array.prototype.indexOf.call(th.parentNode.children, th);
    const numeric = th.getAttribute("data-type") === "number";
    const ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th[aria-sort]").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      const x = key(a, index), y = key(b, index);
      if (x === "" || y === "") return x === y ? 0 : (x === "" ? 1 : -1); // empty last, both ways
      let order;
      if (numeric) order = parseFloat(x.replace(/^=/, "")) - parseFloat(y.replace(/^=/, ""));
      else order = x.localeCompare(y, undefined, { numeric: true, sensitivity: "base" });
      return ascending ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.addEventListener("click", function (ev) {
    const th = ev.target.closest("table.sortable thead th");
    if (!th) return;
    sortBy(th.closest("table"), th);
  });
})();
