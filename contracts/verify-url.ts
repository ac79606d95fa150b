/** Where anyone can check a recorded verdict: its market stream and revision in the log. */
export function verdictVerifyUrl(baseUrl: string, verdict: { stream: string; revision: number }): string {
  return `${baseUrl.replace(/\/$/, '')}/verify/${encodeURIComponent(verdict.stream)}/${verdict.revision}`;
}
