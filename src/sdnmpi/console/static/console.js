// sdnmpi live console: polls /api/fabric (topology, routes, jobs) and /api/loads (link
// rates) and draws them as SVG.  Read-only; names from the fabric go in as text only.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const LOAD_MS = 200, FABRIC_MS = 2000;
const COLORS = ["#d62728", "#ff7f0e", "#9467bd", "#17becf", "#e377c2", "#2ca02c", "#8c564b"];
let fabric = null, fabricText = "", pos = {}, hidden = new Set();

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function natural(a, b) { return a.localeCompare(b, undefined, {numeric: true}); }
function rate(bps) {
  if (bps >= 1e9) return (bps / 1e9).toFixed(2) + " Gb/s";
  if (bps >= 1e6) return (bps / 1e6).toFixed(1) + " Mb/s";
  if (bps >= 1e3) return (bps / 1e3).toFixed(0) + " kb/s";
  return bps.toFixed(0) + " b/s";
}

function layout(f, width, height) {
  const rows = {};
  for (const s of f.switches) (rows[s.level] = rows[s.level] || []).push(s.name);
  const levels = Object.keys(rows).map(Number).sort((a, b) => b - a);
  const all = levels.map(l => rows[l].sort(natural));
  all.push(f.hosts.map(h => h.name).sort(natural));
  const out = {}, dy = (height - 80) / Math.max(1, all.length - 1);
  all.forEach((row, i) => row.forEach((n, j) => {
    out[n] = {x: (j + 0.5) * width / row.length, y: 30 + i * dy};
  }));
  return out;
}

function overlays(f) {
  // [{key, label, links}] of every job route and tagged primitive, with its colour.
  const out = [];
  for (const [job, pairs] of Object.entries(f.jobs)) {
    out.push({key: "job " + job, attrs: {"data-job": job}, pairs});
  }
  for (const [job, tj] of Object.entries(f.tagged)) {
    for (const [prim, flows] of Object.entries(tj.primitives)) {
      const pairs = {};
      for (const fl of flows) pairs[fl.src + ">" + fl.dst] = fl.links;
      out.push({key: "tagged " + job + " " + prim,
                attrs: {"data-tagged-job": job, "data-primitive": prim}, pairs});
    }
  }
  out.forEach((o, i) => { o.color = COLORS[i % COLORS.length]; o.index = i; });
  return out;
}

function drawFabric(f) {
  const svg = document.getElementById("fabric");
  const width = +svg.getAttribute("width"), height = +svg.getAttribute("height");
  pos = layout(f, width, height);
  const g = id => { const e = document.getElementById(id); e.replaceChildren(); return e; };
  const links = g("links"), paths = g("paths"), loads = g("loads"), nodes = g("nodes");
  for (const ln of f.links) {
    const [a, b] = ln.ends.map(n => pos[n]);
    if (!a || !b) continue;
    links.appendChild(el("line", {class: "link", "data-link": ln.id, x1: a.x, y1: a.y,
                                  x2: b.x, y2: b.y, "stroke-width": 2}));
    loads.appendChild(el("text", {class: "load", "data-link": ln.id, "data-bps": 0,
                                  x: (a.x + b.x) / 2, y: (a.y + b.y) / 2}, ""));
  }
  const ends = Object.fromEntries(f.links.map(l => [l.id, l.ends]));
  const side = document.getElementById("overlays");
  side.replaceChildren();
  for (const o of overlays(f)) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox"; box.checked = !hidden.has(o.key);
    box.onchange = () => { box.checked ? hidden.delete(o.key) : hidden.add(o.key); drawFabric(fabric); };
    label.append(box, " ");
    const swatch = document.createElement("span");
    swatch.style.color = o.color; swatch.textContent = "\u25a0 ";
    const n = Object.keys(o.pairs).length;
    label.append(swatch, o.key + " (" + n + " path" + (n === 1 ? "" : "s") + ")");
    side.append(label, document.createElement("br"));
    if (hidden.has(o.key)) continue;
    const off = (o.index % 5 - 2) * 3;
    const seen = new Set();
    for (const [pair, ids] of Object.entries(o.pairs)) {
      for (const id of ids) {
        if (seen.has(id) || !ends[id]) continue;
        seen.add(id);
        const [a, b] = ends[id].map(n => pos[n]);
        paths.appendChild(el("line", {class: "path", "data-link": id, "data-pair": pair,
          ...o.attrs, x1: a.x + off, y1: a.y + off, x2: b.x + off, y2: b.y + off,
          stroke: o.color, "stroke-width": 5}));
      }
    }
  }
  for (const s of f.switches) {
    const p = pos[s.name];
    nodes.appendChild(el("rect", {class: "switch", "data-node": s.name, x: p.x - 30,
                                  y: p.y - 11, width: 60, height: 22, rx: 4}));
    nodes.appendChild(el("text", {class: "node", x: p.x, y: p.y}, s.name));
  }
  for (const h of f.hosts) {
    const p = pos[h.name];
    nodes.appendChild(el("rect", {class: "host", "data-node": h.name, x: p.x - 22,
                                  y: p.y - 10, width: 44, height: 20, rx: 2}));
    nodes.appendChild(el("text", {class: "node", x: p.x, y: p.y}, h.name));
    h.ranks.forEach((r, i) => nodes.appendChild(
      el("text", {class: "ranks", "data-host": h.name, x: p.x, y: p.y + 22 + i * 11},
         "rank " + r)));
  }
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  for (const j of f.table) {
    const tr = document.createElement("tr");
    tr.dataset.job = j.job_id;
    const ranks = f.hosts.flatMap(h => h.ranks.filter(r => r.split(":")[0] === String(j.job_id))).length;
    for (const v of [j.job_id, j.name ?? "", j.state ?? "", ranks || (j.ntasks ?? ""),
                     j.router ?? "", j.pairs ?? ""]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  document.getElementById("name").textContent = f.name ? "— " + f.name : "";
}

function drawLoads(doc) {
  for (const ln of doc.links) {
    const bps = Math.max(ln.fwd_bps, ln.rev_bps);
    const u = Math.min(1, ln.util);
    const line = document.querySelector('line.link[data-link="' + CSS.escape(ln.id) + '"]');
    const text = document.querySelector('text.load[data-link="' + CSS.escape(ln.id) + '"]');
    if (line) {
      line.setAttribute("stroke-width", 2 + 10 * u);
      line.style.stroke = u > 0.005 ? "hsl(" + Math.round(120 * (1 - u)) + ",80%,45%)" : "";
    }
    if (text) {
      text.dataset.bps = bps; text.dataset.util = ln.util;
      text.textContent = bps >= 1e3 ? rate(bps) + " " + (100 * ln.util).toFixed(0) + "%" : "";
    }
  }
  const age = doc.age_s === null ? "no samples" : "samples " + doc.age_s.toFixed(2) + " s old";
  document.getElementById("status").textContent = " " + age;
  document.body.dataset.loadsServed = doc.served_time_s;
}

async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.text();
}

async function pollFabric() {
  try {
    const text = await get("api/fabric");
    const doc = JSON.parse(text);
    document.getElementById("error").textContent = doc.error || doc.manager_error || "";
    if (!doc.error && text.replace(/"served_time_s":[^,}]*/, "") !== fabricText) {
      fabricText = text.replace(/"served_time_s":[^,}]*/, "");
      fabric = doc;
      drawFabric(doc);
    }
  } catch (e) { document.getElementById("error").textContent = String(e); }
  setTimeout(pollFabric, FABRIC_MS);
}

async function pollLoads() {
  try {
    const doc = JSON.parse(await get("api/loads"));
    if (fabric && !doc.error) drawLoads(doc);
  } catch (e) { document.getElementById("status").textContent = " " + String(e); }
  setTimeout(pollLoads, LOAD_MS);
}

pollFabric();
pollLoads();
