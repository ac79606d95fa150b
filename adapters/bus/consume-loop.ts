import type { Consumer } from './port.ts';

/**
 * The loop of one consume() call, the same lifecycle in every adapter: `open` starts `run` and
 * hands out the Consumer; stopping ends the loop, wakes it out of whatever it waits on and waits
 * until it returned (with its handlers in flight). A second stop waits for the same end.
 */
export abstract class ConsumeLoop {
  protected running = false;
  private loop: Promise<void> | null = null;

  /** Starts the loop, listed in `active` (what the bus stops on close) until it is stopped. */
  open(active: Set<ConsumeLoop>): Consumer {
    active.add(this);
    this.running = true;
    this.loop = this.run();
    return {
      stop: async () => {
        await this.stop();
        active.delete(this);
      },
    };
  }

  async stop(): Promise<void> {
    if (!this.running) return this.loop ?? undefined;
    this.running = false;
    await this.interrupt();
    await this.loop;
    await this.stopped();
  }

  /** Pulls and handles messages while `running`; returns once the handlers in flight are done. */
  protected abstract run(): Promise<void>;

  /** Wakes the loop out of its waits (new messages, a free slot, a backoff), so it sees the stop. */
  protected abstract interrupt(): void | Promise<void>;

  /** After the loop returned, on the first stop. */
  protected async stopped(): Promise<void> {}
}
