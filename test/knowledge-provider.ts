import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local stand-in for a hosted chat model (we cannot run one here), speaking the OpenAI chat
 * completions protocol and Anthropic's messages protocol. The model name picks the behaviour:
 *   good-*  answers citing the first passage it was given, as [1]
 *   liar-*  cites a passage it was not given ([9])
 *   mute-*  says it does not know, citing nothing
 *   bare-*  answers with a citation marker alone, [1], and no words
 *   slow-*  answers after `slowMs`
 *   late-*  answers like good-* after `lateMs` (within the chat timeout: long enough for a test
 *           to act while a chat holds its unit)
 *   down-*  answers 500
 * `onRequest`, when set, runs as each request arrives, before the answer: a test's fault to inject
 * while the chat is in flight.
 */
export interface ProviderRequest {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
}

export async function startFakeProvider(options: { slowMs?: number; lateMs?: number } = {}) {
  const requests: ProviderRequest[] = [];
  const hooks: { onRequest: ((request: ProviderRequest) => Promise<void>) | null } = { onRequest: null };
  const timers = new Set<NodeJS.Timeout>();
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => {
      raw += chunk.toString('utf8');
    });
    req.on('end', () => {
      const body = JSON.parse(raw) as Record<string, unknown>;
      requests.push({ path: req.url ?? '', headers: req.headers, body });
      const model = String(body.model);
      const anthropic = req.url === '/v1/messages';
      const prompt = anthropic
        ? String((body.messages as { content: string }[])[0]!.content)
        : String((body.messages as { content: string }[])[1]!.content);
      const first = /\[1\] id=\S+ title=[^\n]*\n([^\n]+)/.exec(prompt)?.[1] ?? '';
      const text = model.startsWith('liar')
        ? 'It costs 12 USD [9].'
        : model.startsWith('mute')
          ? 'I do not know.'
          : model.startsWith('bare')
            ? '[1]'
            : `According to the documentation: ${first.slice(0, 120)} [1].`;
      const reply = () => {
        if (model.startsWith('down')) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: 'overloaded' } }));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify(
            anthropic
              ? { id: 'msg_1', type: 'message', role: 'assistant', content: [{ type: 'text', text }] }
              : {
                  id: 'cmpl_1',
                  object: 'chat.completion',
                  choices: [{ index: 0, message: { role: 'assistant', content: text } }],
                },
          ),
        );
      };
      const delay = model.startsWith('slow')
        ? (options.slowMs ?? 5_000)
        : model.startsWith('late')
          ? (options.lateMs ?? 150)
          : 0;
      const later = () => {
        if (delay === 0) return reply();
        const timer = setTimeout(() => {
          timers.delete(timer);
          if (!res.destroyed) reply();
        }, delay);
        timers.add(timer);
      };
      const hook = hooks.onRequest;
      if (hook === null) later();
      else
        hook(requests.at(-1)!).then(later, (err: Error) => {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `test hook failed: ${err.message}` } }));
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    hooks,
    async close() {
      for (const timer of timers) clearTimeout(timer);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
