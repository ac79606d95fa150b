import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { NewEvent } from '../contracts/envelope.ts';

/**
 * The memory store, whose next append of a given event type waits until released, as a slow
 * write leaves it: a paid call held between its reservation and its hand-off (the tool has run,
 * its answer is not kept yet), or a replay's record that its answer was served held while the
 * reconciler writes first. The held append then goes to the store as it was asked for.
 */
export class HoldingStore extends MemoryEventStore {
  private hold: { type: string; arrived: () => void; until: Promise<void> } | null = null;

  /** Holds the next append carrying `type`; resolves `arrived` once it is held. */
  holdNext(type: string): { arrived: Promise<void>; release: () => void } {
    let arrived: () => void = () => undefined;
    let release: () => void = () => undefined;
    const arrival = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const until = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.hold = { type, arrived, until };
    return { arrived: arrival, release };
  }

  override async append(...args: Parameters<MemoryEventStore['append']>) {
    const hold = this.hold;
    if (hold && args[1].some((e: NewEvent) => e.type === hold.type)) {
      this.hold = null;
      hold.arrived();
      await hold.until;
    }
    return super.append(...args);
  }
}
