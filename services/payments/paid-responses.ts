import { createHash } from 'node:crypto';
import { canonicalJson } from '../../contracts/canonical-json.ts';

/**
 * What a paid call bought, as one hash: the tool and its canonical arguments (sha256, hex), over
 * canonical JSON, so two requests with the same arguments in another order match. Recorded with
 * the payment (PaymentAuthorized.fingerprint, PaymentIdentifierClaimed.fingerprint): the same
 * payment or payment id presented with another request is a conflict, not the answer.
 *
 * The answer itself is kept in the payment's own record (PaymentSettlementPending.answer, written
 * when the payment is handed to settlement), so it outlives any process: see payment-flow.ts.
 */
export function requestFingerprint(tool: string, input: unknown): string {
  return createHash('sha256')
    .update(`${tool}\n${canonicalJson(input)}`)
    .digest('hex');
}
