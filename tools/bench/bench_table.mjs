#!/usr/bin/env node
// A Markdown table from one or more `mi-bench --json` files (cells of later
// files are appended), with the llama.cpp ratios when the run had --peer.
//
//   node tools/bench/bench_table.mjs bench-out/short.json bench-out/long.json
import { readBenchFiles } from './bench_json.mjs';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: bench_table.mjs MI_BENCH_JSON...');
  process.exit(2);
}
const rows = [];
const heads = [];
readBenchFiles('bench_table.mjs', files).forEach((doc, i) => {
  heads.push(`${files[i]}: ${doc.threads} threads, ${doc.repeats} repeat(s), KV ${doc.kv_type || 'f32'}, ` +
    `triad ${doc.bandwidth_gbs.triad.toFixed(1)} GB/s, read ${doc.bandwidth_gbs.read.toFixed(1)} GB/s` +
    (doc.fma_peak && doc.fma_peak.roofline_gflops > 0
      ? `, FMA peak ${doc.fma_peak.roofline_gflops.toFixed(1)} GFLOP/s (${doc.fma_peak.variant})` : ''));
  for (const c of doc.cells) rows.push(c);
});
const f1 = (x) => (x === undefined ? '–' : x.toFixed(1));
const f2 = (x) => (x === undefined ? '–' : x.toFixed(2));
const pc = (x) => (x === undefined ? '–' : `${Math.round(100 * x)}%`);
const rx = (x) => (x === undefined || x === 0 ? '–' : `${x.toFixed(2)}×`);
console.log(heads.map((h) => `- ${h}`).join('\n'));
console.log('');
// % FMA peak: prefill GFLOP/s over the FMA peak of the kernel variant in
// use (register-only loop, mi-bench's `fma` line): the figure that means the
// same on every host; older JSON without it shows '–'.
console.log('| prompt | gen | TTFT ms | prefill tok/s | % matmul peak | % FMA peak | decode tok/s | roofline tok/s | % roofline | peak RSS MiB | RSS bound MiB | llama.cpp prefill | llama.cpp decode | × prefill | × decode |');
console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const c of rows) {
  const p = c.peer || {};
  const fma = c.fma_peak_gflops > 0 ? c.prefill_fma_fraction : undefined;
  console.log(`| ${c.prompt} | ${c.gen} | ${Math.round(c.ttft_ms)} | ${f1(c.prefill_tps)} | ${pc(c.prefill_peak_fraction)} | ${pc(fma)} | ` +
    `${f2(c.decode_tps)} | ${f2(c.roofline_tps)} | ${pc(c.roofline_fraction)} | ${Math.round(c.peak_rss_mib)} | ${c.rss_bound_mib === undefined ? '–' : Math.round(c.rss_bound_mib)} | ` +
    `${f1(p.prefill_tps)} | ${f2(p.decode_tps)} | ${rx(p.prefill_ratio)} | ${rx(p.decode_ratio)} |`);
}
