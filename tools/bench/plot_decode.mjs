#!/usr/bin/env node
// Decode tokens/s by position, from `mi-bench --json` output, as an SVG line
// chart (one line per cell; cells of later files are added). No dependencies.
//
//   node tools/bench/plot_decode.mjs bench.json [more.json ...] > decode.svg
import { readBenchFiles } from './bench_json.mjs';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: plot_decode.mjs MI_BENCH_JSON... > out.svg');
  process.exit(2);
}
const docs = readBenchFiles('plot_decode.mjs', files);
const cells = docs.flatMap((d) => d.cells || []).filter((c) => (c.decode_by_position || []).length > 0);
if (cells.length === 0) {
  console.error(`plot_decode.mjs: ${files.join(', ')}: no cell has decode_by_position points`);
  process.exit(1);
}

const W = 720, H = 400, L = 60, R = 170, T = 30, B = 50;
const pts = cells.flatMap((c) => c.decode_by_position);
const xmax = Math.max(...pts.map((p) => p[0])) * 1.02;
const ymax = Math.max(...pts.map((p) => p[1]), ...cells.map((c) => c.roofline_tps || 0)) * 1.1;
const sx = (x) => L + (x / xmax) * (W - L - R);
const sy = (y) => H - B - (y / ymax) * (H - T - B);
const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22'];

const out = [];
out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`);
out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
out.push(`<text x="${L}" y="18" font-size="14">MetaInfer decode tokens/s by position (${docs[0].threads} threads)</text>`);
for (let i = 0; i <= 5; i++) {
  const y = (ymax * i) / 5;
  out.push(`<line x1="${L}" x2="${W - R}" y1="${sy(y)}" y2="${sy(y)}" stroke="#ddd"/>`);
  out.push(`<text x="${L - 6}" y="${sy(y) + 4}" text-anchor="end">${y.toFixed(1)}</text>`);
  const x = (xmax * i) / 5;
  out.push(`<text x="${sx(x)}" y="${H - B + 16}" text-anchor="middle">${Math.round(x)}</text>`);
}
out.push(`<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">position (tokens in context)</text>`);
out.push(`<text x="16" y="${(T + H - B) / 2}" transform="rotate(-90 16 ${(T + H - B) / 2})" text-anchor="middle">tokens/s</text>`);
cells.forEach((c, i) => {
  const col = colors[i % colors.length];
  const d = c.decode_by_position.map((p, k) => `${k ? 'L' : 'M'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
  out.push(`<path d="${d}" fill="none" stroke="${col}" stroke-width="2"/>`);
  const ly = T + 16 * i;
  out.push(`<line x1="${W - R + 10}" x2="${W - R + 30}" y1="${ly}" y2="${ly}" stroke="${col}" stroke-width="2"/>`);
  out.push(`<text x="${W - R + 36}" y="${ly + 4}">prompt ${c.prompt}, gen ${c.gen}</text>`);
});
out.push('</svg>');
console.log(out.join('\n'));
