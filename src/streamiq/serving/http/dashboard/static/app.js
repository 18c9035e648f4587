// streamiq dashboard: reads /v1/events (server-sent events, fetched with the token) and
// draws the cluster; runs queries against this node, once or live (the views' /changes
// and /aggregate/changes streams, polling if those fail). Plain ES module, no dependencies.

const $ = (sel) => document.querySelector(sel);
let previous = null; // the last snapshot: request rates are differences between two
let reading = null;  // the AbortController of the open event stream
let watching = null; // the AbortController of the live query (stream or polling)

function authHeaders() {
  const token = sessionStorage.getItem("streamiq-token") || "";
  return token ? { authorization: `Bearer ${token}` } : {};
}

function say(text) {
  const status = $("#status");
  if (status.textContent !== text) status.textContent = text;
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function ms(seconds) {
  return seconds == null ? "-" : `${(seconds * 1000).toFixed(seconds < 0.01 ? 2 : 1)} ms`;
}

// a restoring replica's rate: its offset's last sample, per view/partition/node, and
// the records a second since (smoothed), for the time it has left
const restores = new Map();

function restoreRate(id, offset) {
  const now = performance.now() / 1000;
  const was = restores.get(id);
  let rate = was ? was.rate : null;
  if (was && now > was.t && offset >= was.offset) {
    const seen = (offset - was.offset) / (now - was.t);
    rate = rate == null ? seen : 0.5 * rate + 0.5 * seen;
  }
  restores.set(id, { offset, t: now, rate });
  return rate;
}

function left(lag, rate) {
  if (!rate || lag < 0) return null;
  const s = lag / rate;
  return s < 60 ? `${Math.ceil(s)} s` : `${Math.ceil(s / 60)} min`;
}

function roles(snap) {
  // view -> partition -> node -> {role, lag}
  const out = {};
  const held = {};
  for (const n of snap.cluster.nodes) {
    for (const [view, parts] of Object.entries(n.partitions)) {
      for (const [p, st] of Object.entries(parts)) {
        ((held[view] ??= {})[p] ??= {})[n.endpoint] = st;
      }
    }
  }
  for (const [view, parts] of Object.entries(snap.cluster.views)) {
    out[view] = {};
    for (const [p, info] of Object.entries(parts)) {
      const row = (out[view][p] = {});
      const here = (held[view] || {})[p] || {};
      for (const [node, st] of Object.entries(here)) {
        const i = info.assigned.indexOf(node);
        const role = !st.restored ? "restoring" : i === 0 ? "active" : i > 0 ? "standby" : "previous";
        // a restoring replica: how much of the changelog it has applied so far
        // (lag -1: the changelog's end not yet known)
        // (lag -1: the changelog's end not yet known); one copied from a peer first:
        // the thousandths of the copy received (copied)
        const copying = st.copied != null;
        const done = copying ? Math.floor(st.copied / 10) : st.lag < 0 ? "?" : st.lag > 0
          ? Math.floor((100 * st.offset) / (st.offset + st.lag)) : 100;
        const id = `${view}/${p}/${node}`;
        const rate = role === "restoring" && !copying ? restoreRate(id, st.offset) : null;
        if (role !== "restoring" || copying) restores.delete(id);
        row[node] = { role, lag: st.lag, done, rate, left: left(st.lag, rate), copying };
      }
    }
  }
  return out;
}

function drawNodes(snap, map) {
  const body = $("#nodes tbody");
  body.replaceChildren();
  for (const n of snap.cluster.nodes) {
    let active = 0, standby = 0, restoring = 0, lag = 0;
    for (const parts of Object.values(map)) {
      for (const row of Object.values(parts)) {
        const r = row[n.endpoint];
        if (!r) continue;
        if (r.role === "active") active++;
        else if (r.role === "restoring") restoring++;
        else standby++;
        lag = Math.max(lag, r.lag);
      }
    }
    const tr = document.createElement("tr");
    tr.dataset.node = n.endpoint;
    const name = n.endpoint + (n.self ? " (this node)" : "");
    const up = n.started_at ? `${Math.max(0, Math.round(snap.at - n.started_at))} s` : "-";
    tr.append(cell(name), cell(active), cell(standby), cell(restoring), cell(lag), cell(up));
    body.append(tr);
  }
}

function freshness(snap, view, parts) {
  // how far behind the answers of this view are: the largest lag of an active replica,
  // and when the pipeline last published progress for it
  let worst = null;
  for (const row of Object.values(parts)) {
    for (const r of Object.values(row)) {
      if (r.role === "active") worst = Math.max(worst ?? 0, r.lag);
    }
  }
  const lag = worst == null ? "no active replica" : `active replicas at most ${worst} behind`;
  const p = (snap.pipeline || {})[view];
  const age = p && p.at ? `, pipeline progress ${Math.max(0, Math.round(snap.at - p.at))} s old` : "";
  return lag + age;
}

function drawMap(snap, map) {
  const nodes = snap.cluster.nodes.map((n) => n.endpoint);
  const root = $("#map");
  root.replaceChildren();
  for (const [view, parts] of Object.entries(map).sort()) {
    const table = document.createElement("table");
    table.dataset.view = view;
    const caption = document.createElement("caption");
    caption.textContent = `${view}: ${freshness(snap, view, parts)}`;
    const head = document.createElement("tr");
    const corner = document.createElement("th");
    corner.scope = "col";
    corner.textContent = "partition";
    head.append(corner);
    for (const n of nodes) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = n;
      head.append(th);
    }
    table.append(caption, head);
    for (const [p, row] of Object.entries(parts)) {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = p;
      tr.append(th);
      for (const n of nodes) {
        const td = document.createElement("td");
        td.className = "cell";
        const r = row[n];
        td.dataset.node = n;
        td.dataset.partition = p;
        td.dataset.role = r ? r.role : "none";
        if (r) {
          const span = document.createElement("span");
          span.className = r.role === "previous" ? "standby" : r.role;
          const restoring = r.role === "restoring";
          const eta = restoring && r.left ? ` ${r.left}` : "";
          span.textContent = `${r.role[0].toUpperCase()} ${restoring ? `${r.done}%${eta}` : r.lag}`;
          span.title = r.copying ? `restoring, copying from a peer: ${r.done}% received`
            : restoring && r.lag < 0 ? "restoring, the changelog's end not yet known"
            : restoring ? `restoring, ${r.done}% applied, ${r.lag} to go` + (r.rate
            ? `, ${Math.round(r.rate).toLocaleString()} records/s, ${r.left} left` : "")
            : `${r.role}, lag ${r.lag}`;
          span.setAttribute("aria-hidden", "true");
          const spoken = document.createElement("span");  // the letter, said in full
          spoken.className = "sr-only";
          spoken.textContent = span.title;
          td.append(span, spoken);
        } else {
          td.textContent = "-";
        }
        tr.append(td);
      }
      table.append(tr);
    }
    root.append(table);
  }
}

function drawTraffic(snap) {
  const body = $("#traffic tbody");
  body.replaceChildren();
  if (!snap.traffic) {  // the node's traffic is cluster-wide: the token lacks cluster:read
    const td = cell("this token sees its views only (the node's requests need cluster:read)");
    td.colSpan = 5;
    const tr = document.createElement("tr");
    tr.append(td);
    body.append(tr);
    return;
  }
  $("#latency-note").hidden = Object.keys(snap.latency || {}).length > 0;
  const dt = previous && previous.traffic ? snap.at - previous.at : 0;
  for (const served of ["local", "forwarded", "fanout"]) {
    const total = snap.traffic[served];
    const rate = dt > 0 ? (total - previous.traffic[served]) / dt : 0;
    const lat = snap.latency[served] || {};
    const tr = document.createElement("tr");
    tr.append(cell(served), cell(rate.toFixed(1)), cell(ms(lat.p50)), cell(ms(lat.p99)),
      cell(total));
    body.append(tr);
  }
}

// write to stored: the node's cumulative histograms per view; the page keeps one sample
// every WINDOW_S seconds for HISTORY_S and plots the p50/p99 of each window's new rows
const WINDOW_S = 5;
const HISTORY_S = 300;
const freshHistory = {}; // view -> [{at, counts, p50, p99}]

function quantile(buckets, counts, q) {
  // as Prometheus' histogram_quantile: linear within the bucket (seconds)
  const total = counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] && seen + counts[i] >= rank) {
      const lo = i ? buckets[i - 1] : 0;
      const hi = i < buckets.length ? buckets[i] : buckets[buckets.length - 1];
      return lo + ((hi - lo) * (rank - seen)) / counts[i];
    }
    seen += counts[i];
  }
  return buckets[buckets.length - 1];
}

function sparkline(samples, at) {
  // two polylines (p50, p99) over the last HISTORY_S seconds, on a log scale of ms
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  const w = 240, h = 40;
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("role", "img");
  const shown = samples.filter((s) => s.p99 != null);
  const top = Math.max(...shown.map((s) => s.p99), 0.01);
  svg.setAttribute("aria-label", `p99 up to ${ms(top)} in the last ${HISTORY_S / 60} minutes`);
  const y = (v) => h - 2 - ((h - 4) * Math.log10(1 + v * 1000)) / Math.log10(1 + top * 1000);
  for (const [key, color] of [["p50", "#0b3d91"], ["p99", "#8a4b00"]]) {
    const line = document.createElementNS(svgNS, "polyline");
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("points", shown.map((s) =>
      `${(w * (1 - (at - s.at) / HISTORY_S)).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  return svg;
}

function drawFreshness(snap) {
  const body = $("#freshness tbody");
  body.replaceChildren();
  const views = Object.entries(snap.freshness || {}).sort();
  if (!views.length) {
    const tr = document.createElement("tr");
    const td = cell("no row carrying its input time stored here yet");
    td.colSpan = 7;
    tr.append(td);
    body.append(tr);
  }
  for (const [view, f] of views) {
    const hist = (freshHistory[view] ??= []);
    const last = hist[hist.length - 1];
    if (!last || snap.at - last.at >= WINDOW_S) {
      const delta = last ? f.counts.map((n, i) => n - (last.counts[i] || 0)) : f.counts;
      hist.push({ at: snap.at, counts: f.counts, p50: last ? quantile(f.buckets, delta, 0.5) : null,
        p99: last ? quantile(f.buckets, delta, 0.99) : null });
      while (hist.length && snap.at - hist[0].at > HISTORY_S) hist.shift();
    }
    const now = hist[hist.length - 1];
    const tr = document.createElement("tr");
    const graph = cell("");
    graph.append(sparkline(hist, snap.at));
    tr.append(cell(view), cell(ms(now.p50)), cell(ms(now.p99)), cell(ms(f.p50)),
      cell(ms(f.p99)), cell(f.count), graph);
    body.append(tr);
  }
}

function drawPipeline(snap) {
  const body = $("#pipeline tbody");
  body.replaceChildren();
  const views = Object.entries(snap.pipeline || {});
  if (!views.length) {
    const tr = document.createElement("tr");
    const td = cell("no progress published yet");
    td.colSpan = 7;
    tr.append(td);
    body.append(tr);
  }
  for (const [view, p] of views.sort()) {
    const tr = document.createElement("tr");
    const age = p.at ? `${Math.max(0, Math.round(snap.at - p.at))} s ago` : "-";
    tr.append(cell(view), cell(p.batches), cell((p.input_rate || 0).toFixed(1)),
      cell((p.process_rate || 0).toFixed(1)), cell(ms((p.duration_ms || 0) / 1000)),
      cell(p.dead_letters), cell(age));
    body.append(tr);
  }
}

function drawParts(snap) {
  // the parts of the streamiq up that started this node (cluster:read only)
  $("#parts-section").hidden = !snap.up;
  const body = $("#parts tbody");
  body.replaceChildren();
  for (const p of (snap.up || {}).parts || []) {
    const tr = document.createElement("tr");
    const state = p.crash_looping ? "crash-looping" : p.ready ? "ready" : "starting";
    if (p.crash_looping) tr.className = "crash-looping";
    tr.append(cell(p.name), cell(p.ready ? "yes" : "no"), cell(p.restarts),
      cell(p.last_exit ? `${state}; last exit ${p.last_exit}` : state));
    body.append(tr);
  }
}

function draw(snap) {
  const map = roles(snap);
  drawNodes(snap, map);
  drawMap(snap, map);
  drawTraffic(snap);
  drawFreshness(snap);
  drawPipeline(snap);
  drawParts(snap);
  // the live region says only what changes rarely (screen readers announce each change)
  say(`live from ${snap.self}${snap.ready ? "" : " (not ready)"}: ` +
    `${snap.cluster.nodes.length} nodes`);
  $("#as-of").textContent = `as of ${new Date(snap.at * 1000).toLocaleTimeString()}`;
  previous = snap;
}

// The frames of a server-sent events response, as they arrive.
async function* sseFrames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      yield buf.slice(0, end);
      buf = buf.slice(end + 2);
    }
  }
}

async function follow() {
  if (reading) reading.abort();
  reading = new AbortController();
  while (true) {
    try {
      const r = await fetch("/v1/events", { headers: authHeaders(), signal: reading.signal });
      if (r.status === 401 || r.status === 403) {
        say(`token refused (${r.status}): paste the token and connect`);
        return;
      }
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      for await (const frame of sseFrames(r)) {
        if (frame.startsWith("data: ")) draw(JSON.parse(frame.slice(6)));
      }
    } catch (err) {
      if (reading.signal.aborted) return;
      say(`disconnected (${err.message}); retrying`);
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

function queryRequest(form) {
  const type = form.get("type");
  const view = encodeURIComponent(form.get("view").trim());
  const key = form.get("key").trim();
  const params = form.get("params").trim();
  const qs = params ? `?${params}` : "";
  const base = `/v1/views/${view}`;
  switch (type) {
    case "lookup": return [`${base}/keys/${encodeURIComponent(key)}${qs}`, {}];
    case "windows": return [`${base}/keys/${encodeURIComponent(key)}/windows${qs}`, {}];
    case "multiget": return [`${base}/keys${qs}`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ keys: key.split(",").map((k) => k.trim()).filter(Boolean) }) }];
    default: return [`${base}/${type}${qs}`, {}];
  }
}

// A live query: the changes of its keys (lookup, multi-get), of a prefix (scan) or its
// result (aggregate) as server-sent events, read with fetch to send the token (an
// EventSource cannot); resumed by Last-Event-ID when dropped. If the stream cannot be
// had (an older node, a proxy that buffers), the query is polled every 2 s instead.
function liveRequest(form) {
  const type = form.get("type");
  const view = encodeURIComponent(form.get("view").trim());
  const params = new URLSearchParams(form.get("params").trim());
  const base = `/v1/views/${view}`;
  if (type === "aggregate") return `${base}/aggregate/changes?${params}`;
  if (type === "lookup" || type === "multiget") {
    const keys = form.get("key").split(",").map((k) => k.trim()).filter(Boolean);
    return `${base}/changes?${keys.map((k) => `key=${encodeURIComponent(k)}`).join("&")}`;
  }
  if (type === "scan") {
    const prefix = params.get("prefix");
    return `${base}/changes${prefix ? `?prefix=${encodeURIComponent(prefix)}` : ""}`;
  }
  return null; // windows: polled
}

async function streamLive(url, signal, show) {
  const rows = new Map();
  let last = null;
  let failures = 0;
  while (failures < 2) {
    try {
      const headers = { ...authHeaders(), ...(last ? { "last-event-id": last } : {}) };
      const r = await fetch(url, { headers, signal });
      if (!r.ok || !(r.headers.get("content-type") || "").startsWith("text/event-stream")) {
        show(`${r.status} ${await r.text()}`, `live stream refused (${r.status})`);
        if (r.status >= 400 && r.status < 500 && r.status !== 429) return true;
        throw new Error(`HTTP ${r.status}`);
      }
      for await (const frame of sseFrames(r)) {
        const ev = {};
        for (const line of frame.split("\n")) {
          const at = line.indexOf(":");
          if (at <= 0) continue; // a comment (keepalive)
          ev[line.slice(0, at)] = (ev[line.slice(0, at)] || "") + line.slice(at + 1).trim();
        }
        if (ev.id) last = ev.id;
        if (ev.event === "reset") rows.clear();
        if (ev.event || !ev.data) continue;
        const doc = JSON.parse(ev.data);
        failures = 0;
        if (doc.key === undefined) show(JSON.stringify(doc, null, 2), "live: aggregate");
        else {
          rows.set(doc.key, doc);
          show(JSON.stringify([...rows.values()], null, 2),
            `live: ${rows.size} key${rows.size === 1 ? "" : "s"}, position ${last || "-"}`);
        }
      }
    } catch (err) {
      if (signal.aborted) return true;
      failures += 1;
    }
  }
  return false; // the stream failed twice in a row: poll instead
}

async function pollLive(url, init, signal, show) {
  while (!signal.aborted) {
    try {
      const r = await fetch(url, { ...init, signal,
        headers: { ...(init.headers || {}), ...authHeaders() } });
      const text = await r.text();
      let shown = text;
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON */ }
      show(shown, `live (polling every 2 s): ${r.status}`);
    } catch (err) {
      if (signal.aborted) return;
      show("", `live (polling): failed: ${err.message}`);
    }
    await new Promise((ok) => setTimeout(ok, 2000));
  }
}

async function watch(form) {
  if (watching) watching.abort();
  watching = new AbortController();
  const signal = watching.signal;
  const show = (text, note) => {
    if (signal.aborted) return;
    $("#q-answer").textContent = text;
    $("#q-meta").textContent = note;
  };
  const url = liveRequest(form);
  $("#q-meta").textContent = `live: ${url || "polling"} ...`;
  if (url && await streamLive(url, signal, show)) return;
  const [pollUrl, init] = queryRequest(form);
  await pollLive(pollUrl, init, signal, show);
}

async function runQuery(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  if (watching) { watching.abort(); watching = null; }
  if (form.get("live")) { watch(form); return; }
  const [url, init] = queryRequest(form);
  const meta = $("#q-meta");
  const answer = $("#q-answer");
  meta.textContent = `${init.method || "GET"} ${url} ...`;
  const t0 = performance.now();
  try {
    const r = await fetch(url, { ...init, headers: { ...(init.headers || {}), ...authHeaders() } });
    const took = performance.now() - t0;
    const text = await r.text();
    let shown = text;
    try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON */ }
    const by = r.headers.get("x-streamiq-served-by") || "-";
    const hops = r.headers.get("x-streamiq-hops") || "0";
    meta.textContent = `${r.status} in ${took.toFixed(1)} ms; answered by ${by}, ` +
      `${hops} hop${hops === "1" ? "" : "s"} from this node`;
    answer.textContent = shown;
  } catch (err) {
    meta.textContent = `failed: ${err.message}`;
  }
}

$("#token").value = sessionStorage.getItem("streamiq-token") || "";
$("#auth").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("streamiq-token", $("#token").value.trim());
  follow();
});
$("#query").addEventListener("submit", runQuery);
follow();
