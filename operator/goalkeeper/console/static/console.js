// Live updates from the console's own watches. Every value is set as text, never as markup;
// a monitor page swaps in its section as the server rendered (and escaped) it.
"use strict";

function liveState(text) {
  const state = document.getElementById("live-state");
  if (state) state.textContent = "live updates: " + text;
}

function monitorLink(namespace, name) {
  const link = document.createElement("a");
  link.href = document.body.dataset.root + "monitors/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
  link.textContent = name;
  return link;
}

function fillRow(tr, data) {
  tr.replaceChildren();
  const ns = document.createElement("td");
  ns.textContent = data.namespace;
  const name = document.createElement("td");
  name.appendChild(monitorLink(data.namespace, data.name));
  if (data.paused) {
    const tag = document.createElement("span");
    tag.className = "tag";
    tag.textContent = "paused";
    name.append(" ", tag);
  }
  tr.append(ns, name);
  for (const value of data.cells) {
    const td = document.createElement("td");
    td.textContent = value;
    tr.appendChild(td);
  }
}

function upsert(body, data) {
  let tr = body.querySelector('tr[data-key="' + CSS.escape(data.key) + '"]');
  if (data.type === "DELETED") {
    if (tr) tr.remove();
    return;
  }
  if (!tr) {
    tr = document.createElement("tr");
    tr.dataset.key = data.key;
    const after = Array.from(body.rows).find((row) => row.dataset.key > data.key);
    body.insertBefore(tr, after || null);
  }
  fillRow(tr, data);
}

// One live stream: its state shown on the page, each change handed to `changed`.
function follow(url, changed) {
  const source = new EventSource(url);
  source.onopen = () => liveState("on");
  source.onerror = () => liveState("reconnecting");
  source.onmessage = (message) => {
    const data = JSON.parse(message.data);
    if (data.type === "ERROR") liveState("stopped: " + data.message);
    else changed(data);
  };
}

function followList(table) {
  const body = table.tBodies[0];
  follow(table.dataset.events, (data) => {
    if (data.type === "SYNC") {
      for (const tr of Array.from(body.rows)) {
        if (data.namespace === null || tr.dataset.key.startsWith(data.namespace + "/")) {
          if (!data.rows.some((row) => row.key === tr.dataset.key)) tr.remove();
        }
      }
      for (const row of data.rows) upsert(body, row);
    } else {
      upsert(body, data);
    }
    const empty = document.getElementById("empty");
    if (empty) empty.hidden = body.rows.length > 0;
  });
}

function followMonitor(live) {
  let pending = false;
  // Several changes in a burst fetch the section once.
  const swap = async () => {
    // A note being typed is not wiped: the swap waits until the field is left.
    const active = document.activeElement;
    if (active && active.tagName === "INPUT" && live.contains(active)) {
      setTimeout(swap, 1000);
      return;
    }
    pending = false;
    const response = await fetch(live.dataset.fragment, { credentials: "same-origin" });
    if (response.ok) live.innerHTML = await response.text();
  };
  follow(live.dataset.events, () => {
    if (pending) return;
    pending = true;
    setTimeout(swap, 300);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("monitors");
  if (table) followList(table);
  const live = document.getElementById("live");
  if (live) followMonitor(live);
});
