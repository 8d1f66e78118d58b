// A webhook receiver, as a user would write one with the standardwebhooks package: every
// delivery is verified (signature and timestamp) before it counts. The end-to-end tests drive
// it through two routes of its own:
//   POST /_control  {"secrets": ["whsec_..."], "down": true|false}   which secrets to trust,
//                   and whether to refuse deliveries (503, Retry-After: 1) as if it were down
//   GET  /_received {"received": [{id, type, data}], "failures": n, "refused": n}
// It prints {"port": N} on its first line once it listens on 127.0.0.1.
import http from 'node:http';
import { Webhook } from 'standardwebhooks';

let secrets = [];
let down = false;
const received = [];
let failures = 0;
let refused = 0;

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    if (req.url === '/_control') {
      const c = JSON.parse(body);
      if (c.secrets) secrets = c.secrets;
      if ('down' in c) down = c.down;
      res.end('{}');
      return;
    }
    if (req.url === '/_received') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ received, failures, refused }));
      return;
    }
    if (down) {
      refused++;
      res.statusCode = 503;
      res.setHeader('Retry-After', '1');
      res.end('down for maintenance');
      return;
    }
    const headers = {
      'webhook-id': req.headers['webhook-id'],
      'webhook-timestamp': req.headers['webhook-timestamp'],
      'webhook-signature': req.headers['webhook-signature'],
    };
    let payload = null;
    for (const s of secrets) {
      try {
        payload = new Webhook(s).verify(body, headers);
        break;
      } catch (e) {
        // try the next secret
      }
    }
    if (payload === null) {
      failures++;
      res.statusCode = 401;
      res.end('signature does not verify');
      return;
    }
    received.push({ id: headers['webhook-id'], type: payload.type, data: payload.data });
    res.statusCode = 204;
    res.end();
  });
});

server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
