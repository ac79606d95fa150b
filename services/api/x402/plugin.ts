import type { x402ResourceServer } from '@x402/core/server';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { describeFailure } from '../../engine/operation-errors.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import { PaymentLedger } from '../../payments/ledger.ts';
import type { Rail } from '../../payments/rails.ts';
import { decodePaymentHeader, paymentResponseHeader } from './codecs.ts';
import { contentTypeProblem } from './content-type.ts';
import { CORS_PREFLIGHT_HEADERS, CORS_RESPONSE_HEADERS } from './cors.ts';
import { type Refusal, runPaidCall } from './payment-flow.ts';
import { Quoter } from './quote.ts';
import { serviceBlock } from './service-block.ts';
import { type PaidTool, paidTools, type X402Prices } from './tools.ts';

export interface X402PluginOptions {
  ops: SignalOperations;
  store: EventStore;
  /** Initialised resource server (see services/payments/resource-server.ts). */
  server: x402ResourceServer;
  rails: Rail[];
  prices: X402Prices;
  /** Largest accepted body on these routes; larger is 413 before any handler runs. */
  bodyLimit: number;
  logger: Logger;
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

function hasBody(request: FastifyRequest): boolean {
  const length = Number(request.headers['content-length'] ?? 0);
  return length > 0 || request.headers['transfer-encoding'] !== undefined;
}

type BodyResult = { ok: true; input: unknown } | { ok: false; refusal: Refusal };

function readBody(tool: PaidTool, raw: unknown): BodyResult {
  let json: unknown = {};
  if (typeof raw === 'string' && raw.trim() !== '') {
    try {
      json = JSON.parse(raw);
    } catch {
      return {
        ok: false,
        refusal: {
          status: 400,
          body: { code: 'invalid_input', message: 'the body is not valid JSON', issues: [] },
        },
      };
    }
  }
  const parsed = tool.input.safeParse(json);
  if (parsed.success) return { ok: true, input: parsed.data };
  const failure = describeFailure(parsed.error)!;
  return {
    ok: false,
    refusal: {
      status: 400,
      body: { code: failure.code, message: failure.message, issues: failure.issues ?? [] },
    },
  };
}

function describe(logger: Logger, err: unknown): Refusal {
  const failure = describeFailure(err);
  if (!failure) {
    logger.error({ err }, 'paid operation failed');
    return { status: 500, body: { code: 'INTERNAL_ERROR', message: 'internal error' } };
  }
  return {
    status: failure.status,
    body: {
      code: failure.code,
      message: failure.message,
      retryable: failure.retryable,
      ...(failure.issues ? { issues: failure.issues } : {}),
    },
  };
}

/**
 * Keyless pay-per-call: POST /x402/<tool>. Order of checks: body (400), payment (402), then the
 * paid flow of payment-flow.ts. The plugin owns its body parsing so that a doubled or merged
 * Content-Type reaches the handler as `invalid_content_type` instead of Fastify's 415.
 */
export function x402Plugin(options: X402PluginOptions): FastifyPluginAsync {
  return async (app) => {
    const quoter = new Quoter(options.server, options.rails);
    const ledger = new PaymentLedger(options.store);
    const problems = new WeakMap<FastifyRequest, string>();

    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      '*',
      { parseAs: 'string', bodyLimit: options.bodyLimit },
      (_request, body, done) => done(null, body),
    );
    app.addHook('onRequest', async (request, reply) => {
      reply.headers({ ...CORS_RESPONSE_HEADERS, 'cache-control': 'no-store' });
      if (request.method !== 'POST') return;
      const problem = contentTypeProblem(request.raw.rawHeaders, hasBody(request));
      if (problem) {
        problems.set(request, problem);
        // Fastify would answer a merged media type with its own 415; the body is read raw instead.
        request.headers['content-type'] = 'application/octet-stream';
      }
    });

    const sendQuote = async (
      reply: FastifyReply,
      tool: PaidTool,
      price: number,
      url: string,
      code: string,
      message: string,
    ) => {
      const quote = await quoter.quote(
        price,
        { url, description: tool.description, mimeType: 'application/json' },
        code,
        message,
      );
      return reply.code(402).header('PAYMENT-REQUIRED', quote.header).send(quote.body);
    };

    for (const tool of paidTools(options.prices)) {
      const path = `/x402/${tool.name}`;
      app.options(path, async (_request, reply) => reply.code(204).headers(CORS_PREFLIGHT_HEADERS).send());
      app.post(path, { bodyLimit: options.bodyLimit }, async (request, reply) => {
        const problem = problems.get(request) ?? null;
        const decoded = decodePaymentHeader({
          paymentSignature: header(request, 'payment-signature'),
          xPayment: header(request, 'x-payment'),
        });
        const contentRefusal: Refusal | null = problem
          ? { status: 400, body: { code: 'invalid_content_type', message: problem } }
          : null;
        if (contentRefusal && decoded === null)
          return reply.code(contentRefusal.status).send(contentRefusal.body);

        const body = readBody(tool, request.body);
        if (!problem && !body.ok) return reply.code(body.refusal.status).send(body.refusal.body);
        // With a bad Content-Type the body is not trusted for the call, only for pricing the quote.
        const price = tool.price(body.ok ? body.input : null);
        const url = `${request.protocol}://${request.host}${request.url}`;

        if (decoded === null) {
          return sendQuote(reply, tool, price, url, 'payment_required', `payment required: ${tool.name}`);
        }
        if (!decoded.ok) return sendQuote(reply, tool, price, url, decoded.reason, decoded.message);

        const requirements = await quoter.requirements(price);
        const outcome = await runPaidCall(
          { server: options.server, ledger, logger: request.log as Logger },
          {
            payment: decoded.payment,
            requirements,
            resource: { url, description: tool.description, mimeType: 'application/json' },
            requestId: String(request.id),
            tool: tool.name,
            precheck: () => contentRefusal,
            handler: () => tool.run(options.ops, (body as { input: unknown }).input, String(request.id)),
            describe: (err) => describe(request.log as Logger, err),
          },
        );
        const version = decoded.payment.version;
        switch (outcome.kind) {
          case 'payment_rejected':
            return sendQuote(reply, tool, price, url, outcome.reason, outcome.message);
          case 'unavailable':
            return reply.code(503).send({ code: outcome.reason, message: outcome.message });
          case 'refused':
            return reply.code(outcome.refusal.status).send(outcome.refusal.body);
          case 'settlement_failed': {
            if (outcome.settle) reply.header(...paymentResponseHeader(version, outcome.settle));
            return sendQuote(
              reply,
              tool,
              price,
              url,
              'settlement_failed',
              `settlement failed: ${outcome.message}`,
            );
          }
          case 'served': {
            reply.header(...paymentResponseHeader(version, outcome.settle));
            return reply
              .code(200)
              .send({ ...(outcome.result as object), _service: serviceBlock(outcome.receipt) });
          }
        }
      });
    }
  };
}
