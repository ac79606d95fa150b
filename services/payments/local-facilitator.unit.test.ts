import {
  HttpRequestError,
  InternalRpcError,
  InvalidInputRpcError,
  LimitExceededRpcError,
  RpcRequestError,
  TransactionRejectedRpcError,
  UnknownRpcError,
} from 'viem';
import { describe, expect, it } from 'vitest';
import { nodeRefused } from './local-facilitator.ts';

/** The error viem's http transport throws for a JSON-RPC error answer with this code and message. */
function answered(code: number, message: string): Error {
  const raw = new RpcRequestError({ body: {}, error: { code, message }, url: 'http://rpc.test' });
  switch (code) {
    case -32603:
      return new InternalRpcError(raw);
    case -32000:
      return new InvalidInputRpcError(raw);
    case -32003:
      return new TransactionRejectedRpcError(raw);
    case -32005:
      return new LimitExceededRpcError(raw);
    default:
      return new UnknownRpcError(raw);
  }
}

describe('nodeRefused: whether a failed eth_sendRawTransaction left the transaction out of the pool', () => {
  it.each([
    ['geth', -32000, 'nonce too low: next nonce 5, tx nonce 3'],
    ['geth', -32000, 'replacement transaction underpriced'],
    ['geth', -32000, 'transaction underpriced: tip needed 1, tip permitted 0'],
    ['geth', -32000, 'insufficient funds for gas * price + value: balance 0, tx cost 21000'],
    ['geth', -32000, 'intrinsic gas too low: gas 100, minimum needed 21000'],
    ['geth', -32000, 'exceeds block gas limit'],
    ['geth', -32000, 'invalid sender'],
    ['geth', -32000, 'max fee per gas less than block base fee: address 0x1, maxFeePerGas: 1, baseFee: 7'],
    ['geth', -32000, 'transaction type not supported'],
    ['geth', -32000, 'txpool is full'],
    ['geth', -32000, 'tx fee (1.50 ether) exceeds the configured cap (1.00 ether)'],
    ['anvil', -32003, 'Insufficient funds for gas * price + value'],
    ['anvil', -32003, 'Nonce too high'],
    ['reth', -32003, 'nonce too low: next nonce 5, tx nonce 3'],
    ['besu', -32000, 'Upfront cost exceeds account balance'],
    ['nethermind', -32010, 'OldNonce, Current nonce: 5, nonce of rejected tx: 3'],
    ['nethermind', -32010, 'InsufficientFunds, Account balance: 0, cumulative cost: 21000'],
    ['nethermind', -32010, 'FeeTooLow, MaxFeePerGas too low'],
  ])('%s %i %s: refused', (_client, code, message) => {
    expect(nodeRefused(answered(code, message))).toBe(true);
  });

  it.each([
    ['a hosted RPC that passed it on, then failed', -32603, 'internal error'],
    ['a gateway', -32603, 'Internal server error'],
    ['a proxy timing out upstream', -32000, 'context deadline exceeded'],
    ['a proxy timing out upstream', -32000, 'request timed out'],
    ['geth, which has it', -32000, 'already known'],
    ['anvil, which has it', -32003, 'transaction already imported'],
    ['Nethermind, which has it', -32010, 'AlreadyKnown'],
    ['Besu, which has it', -32000, 'Known transaction'],
    ['an unknown code', 12345, 'something went wrong'],
    ['a rate limit', -32005, 'daily request count exceeded, request rate limited'],
    ['no words of the pool', -32000, 'failed to forward transaction'],
    ['an internal error naming a pool refusal', -32603, 'nonce too low'],
  ])('%s (%i %s): not known to be refused', (_who, code, message) => {
    expect(nodeRefused(answered(code, message))).toBe(false);
  });

  it('an HTTP client error status is a refusal; a server error or 408 is not', () => {
    const status = (s: number) => new HttpRequestError({ url: 'http://rpc.test', status: s });
    expect(nodeRefused(status(400))).toBe(true);
    expect(nodeRefused(status(429))).toBe(true);
    expect(nodeRefused(status(408))).toBe(false);
    expect(nodeRefused(status(502))).toBe(false);
    expect(nodeRefused(new Error('socket hang up'))).toBe(false);
  });
});
