// s3rver (an S3 server for Node.js: `make s3rver`) on 127.0.0.1, with a latency added to every request inside the
// server itself (a timer: no CPU spent waiting, no proxy in the way), for bench_object_store_cores.py.
// node bench/s3rver_latency.js PORT FOLDER LATENCY_MS BUCKET   prints "ready" once it listens;
// GET /__requests answers the number of requests served so far, GET /__bytes the bytes of the GETs' bodies (not S3
// names: no bucket has "_" in its name)
const S3rver = require('s3rver');
const [port, folder, latencyMs, bucket] = process.argv.slice(2);
const server = new S3rver({port: Number(port), address: '127.0.0.1', directory: folder, silent: true,
                           configureBuckets: [{name: bucket}]});
const wait = Number(latencyMs);
let served = 0, sent = 0;
server.middleware.unshift(async (ctx, next) => {  // first, before the S3 routes
  if (ctx.path === '/__requests') { ctx.body = String(served); return; }
  if (ctx.path === '/__bytes') { ctx.body = String(sent); return; }
  served += 1;
  if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait));
  await next();
  if (ctx.method === 'GET') {  // a ranged answer's bytes from its Content-Range, a whole one's from its length
    const m = /^bytes (\d+)-(\d+)\//.exec(ctx.response.get('Content-Range') || '');
    sent += m ? Number(m[2]) - Number(m[1]) + 1 : Number(ctx.response.length || 0);
  }
});
server.run().then(() => console.log('ready'));
