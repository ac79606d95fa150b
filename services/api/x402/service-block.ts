/**
 * The `_service` block of a pay-per-call response. Keys and quota arrive with the API-key
 * issue, which replaces this one function: until then a key is not applied, so the caller is
 * anonymous (tier free) and the payment receipt stands where a quota would.
 */
export interface PaymentReceipt {
  status: 'settled' | 'pending';
  network: string;
  asset: string;
  amount: string;
  payer: string;
  transaction: string | null;
}

export function serviceBlock(receipt: PaymentReceipt) {
  return {
    auth: { outcome: 'ABSENT' as const, presented: false, tier: 'free' as const },
    quota: null,
    payment: receipt,
  };
}
