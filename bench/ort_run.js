// ONNX Runtime (CPU) timing for hpdlf's benchmarks:
//   node ort_run.js model.onnx in.npy [reps] [threads]
// Prints one JSON line {ms_median, ms_min, reps, cpu_per_wall}. Needs onnxruntime-node in NODE_PATH.
// HPDLF_BENCH_NO_SPIN=1: asks that ORT's workers sleep between runs instead of
// spinning (on a machine shared with other jobs spinning workers fight them for
// cores).  onnxruntime-node 1.20.1's binding passes no session config entries
// (`extra` is ignored: its binary never calls AddSessionConfigEntry), so there
// its workers spin either way.  cpu_per_wall says what happened: the process's
// CPU time over the timed runs' wall time, about 2 at 2 threads when the worker
// spins (SqueezeNet 1.1, x1, 2000 runs: 4.50 s user in 2.43 s with the request,
// 4.52 s without), nearer 1 when it sleeps.
const fs = require('fs');
const ort = require('onnxruntime-node');

function readNpy(path) {
  const b = fs.readFileSync(path);
  const hlen = b.readUInt16LE(8);
  const hdr = b.toString('latin1', 10, 10 + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(hdr)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(hdr)[1].split(',').filter(s => s.trim()).map(Number);
  const buf = b.buffer.slice(b.byteOffset + 10 + hlen, b.byteOffset + b.length);
  if (descr === '<f4') return new ort.Tensor('float32', new Float32Array(buf), shape);
  if (descr === '<i8') return new ort.Tensor('int64', new BigInt64Array(buf), shape);
  throw new Error('unsupported dtype ' + descr);
}

(async () => {
  const [model, inp, repsS, thrS] = process.argv.slice(2);
  const reps = Number(repsS || 5), threads = Number(thrS || 2);
  const opts = { intraOpNumThreads: threads, interOpNumThreads: 1 };
  if (process.env.HPDLF_BENCH_NO_SPIN === '1')
    opts.extra = { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } };
  const s = await ort.InferenceSession.create(model, opts);
  const feeds = { [s.inputNames[0]]: readNpy(inp) };
  // warm-up as hpdlf-bench-infer's: 3 runs and at least 300 ms (at most 200 runs)
  for (let i = 0, spent = 0; i < 200 && (i < 3 || spent < 300); i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    spent += Number(process.hrtime.bigint() - t0) / 1e6;
  }
  const ms = [];
  const c0 = process.cpuUsage();
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const c = process.cpuUsage(c0), wall = ms.reduce((x, y) => x + y, 0);
  ms.sort((a, b) => a - b);
  console.log(JSON.stringify({ ms_median: ms[Math.floor(ms.length / 2)], ms_min: ms[0], reps,
                               cpu_per_wall: (c.user + c.system) / 1e3 / wall }));
})().catch(e => { console.error(e.message); process.exit(1); });
