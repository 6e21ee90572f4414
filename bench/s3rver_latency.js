// s3rver (an S3 server for Node.js: `make s3rver`) on 127.0.0.1, with a latency added to every request inside the
// server itself (a timer: no CPU spent waiting, no proxy in the way), for bench_object_store_cores.py.
// node bench/s3rver_latency.js PORT FOLDER LATENCY_MS BUCKET   prints "ready" once it listens;
// GET /__requests answers the number of requests served so far (not an S3 name: no bucket has "_" in its name)
const S3rver = require('s3rver');
const [port, folder, latencyMs, bucket] = process.argv.slice(2);
const server = new S3rver({port: Number(port), address: '127.0.0.1', directory: folder, silent: true,
                           configureBuckets: [{name: bucket}]});
const wait = Number(latencyMs);
let served = 0;
server.middleware.unshift(async (ctx, next) => {  // first, before the S3 routes
  if (ctx.path === '/__requests') { ctx.body = String(served); return; }
  served += 1;
  if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait));
  await next();
});
server.run().then(() => console.log('ready'));
