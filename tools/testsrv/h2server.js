// h2server.js -- an HTTP/2 server for the tests (node's http2), in clear
// text (h2c, prior knowledge) or over TLS (ALPN h2), whose answer each path
// names:
//
//   /ok                 200 "ok"
//   /s/NNN[?ra=V]       status NNN (retry-after: V when given)
//   /slow/MS            200 after MS milliseconds
//   /grpc/CODE[?pb=V]   a gRPC answer: 200, a message, trailers grpc-status CODE
//                       (grpc-retry-pushback-ms: V when given)
//   /grpc-only/CODE     a gRPC trailers-only answer (grpc-status in the headers)
//   /refuse             RST_STREAM REFUSED_STREAM (the server did nothing)
//   /rst                RST_STREAM INTERNAL_ERROR
//   /goaway             GOAWAY with last stream id 0 (the stream is unprocessed)
//   /close              the connection destroyed with the stream open
//   /hang               no answer at all
//   /stats              what it did, as JSON: streams per path, streams'
//                       arrival times (ms, its own clock), connections, the
//                       most /slow streams in flight at once (slow_peak)
//
// usage: node h2server.js [--tls CERT KEY]; prints "PORT n" when listening.
'use strict';
const http2 = require('http2');
const fs = require('fs');

const args = process.argv.slice(2);
const stats = { paths: {}, arrivals: [], sessions: 0, slow_inflight: 0, slow_peak: 0 };

function handle(stream, headers) {
  const url = new URL(headers[':path'] || '/', 'http://x');
  const parts = url.pathname.split('/').filter(Boolean);
  const kind = parts[0] || '';
  if (kind !== 'stats') {
    stats.paths[kind] = (stats.paths[kind] || 0) + 1;
    stats.arrivals.push(Number(process.hrtime.bigint() / 1000000n));
  }
  stream.on('error', () => {});
  switch (kind) {
    case 'ok':
      stream.respond({ ':status': 200 });
      stream.end('ok\n');
      break;
    case 's': {
      const h = { ':status': Number(parts[1]) };
      if (url.searchParams.get('ra')) h['retry-after'] = url.searchParams.get('ra');
      stream.respond(h);
      stream.end('status\n');
      break;
    }
    case 'slow':
      stats.slow_peak = Math.max(stats.slow_peak, ++stats.slow_inflight);
      setTimeout(() => {
        stats.slow_inflight--;   // (before its answer goes: the client cannot end it before)
        if (stream.destroyed) return;
        stream.respond({ ':status': 200 });
        stream.end('slow\n');
      }, Number(parts[1]));
      break;
    case 'grpc':
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => {
        const t = { 'grpc-status': parts[1], 'grpc-message': 'test' };
        if (url.searchParams.get('pb')) t['grpc-retry-pushback-ms'] = url.searchParams.get('pb');
        stream.sendTrailers(t);
      });
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
      break;
    case 'grpc-only':
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': parts[1] },
                     { endStream: true });
      break;
    case 'refuse':
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      break;
    case 'rst':
      stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      break;
    case 'goaway':
      stream.session.goaway(http2.constants.NGHTTP2_NO_ERROR, Number(parts[1] || 0));
      break;
    case 'close':
      stream.session.destroy();
      break;
    case 'hang':
      break;
    case 'stats':
      stream.respond({ ':status': 200, 'content-type': 'application/json' });
      stream.end(JSON.stringify(stats));
      break;
    default:
      stream.respond({ ':status': 404 });
      stream.end('no such path\n');
  }
}

const server = args[0] === '--tls'
  ? http2.createSecureServer({ cert: fs.readFileSync(args[1]), key: fs.readFileSync(args[2]) })
  : http2.createServer();
server.on('session', (s) => { stats.sessions++; s.on('error', () => {}); });
server.on('stream', handle);
server.on('sessionError', () => {});
server.listen(0, '127.0.0.1', () => console.log(`PORT ${server.address().port}`));
