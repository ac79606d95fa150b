/**
 * Requests made in one event-loop turn, sent together once the turn's I/O callbacks have run:
 * callers that arrive together (a burst of HTTP requests) share one round trip instead of one
 * each. A batch that reaches `max` is sent at once. `send` settles every item of its batch.
 */
export class TurnBatch<T> {
  private items: T[] = [];
  private scheduled = false;

  constructor(
    private readonly send: (batch: T[]) => void,
    private readonly max: number,
  ) {}

  add(item: T): void {
    this.items.push(item);
    if (this.items.length >= this.max) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
  }

  /** Sends what is waiting now. */
  flush(): void {
    const batch = this.items;
    if (batch.length === 0) return;
    this.items = [];
    this.send(batch);
  }

  private readonly onTurn = () => {
    this.scheduled = false;
    this.flush();
  };
}
