/**
 * The drill's webhook receiver host: an HTTPS server that answers 200 to every delivery and
 * appends one JSON line per request (delivery id, event, sequence, time) to a file, so the drill
 * can count receipts after the fact even across its own restarts.
 *
 *   node --import tsx scripts/drill/receiver.ts <host> <port> <key.pem> <cert.pem> <out.jsonl>
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { createServer } from 'node:https';

const [host, port, keyFile, certFile, out] = process.argv.slice(2);
if (!host || !port || !keyFile || !certFile || !out) {
  process.stderr.write('usage: receiver.ts <host> <port> <key.pem> <cert.pem> <out.jsonl>\n');
  process.exit(2);
}
const server = createServer({ key: readFileSync(keyFile), cert: readFileSync(certFile) }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let seq: number | null = null;
    try {
      seq = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { seq?: number }).seq ?? null;
    } catch {
      // not JSON: still a receipt
    }
    // Written before the answer: a receipt the dispatcher sees as delivered is on file.
    appendFileSync(
      out,
      `${JSON.stringify({
        delivery: req.headers['x-service-delivery'] ?? null,
        event: req.headers['x-service-event'] ?? null,
        subscription: req.url,
        seq,
        at: Date.now(),
      })}\n`,
    );
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
});
server.listen(Number(port), host, () => process.stdout.write(`receiver listening on ${host}:${port}\n`));
