import { type Caller, undebitedService } from '../../metering/caller.ts';
import type { QuotaMeter } from '../../metering/quota-meter.ts';
import type { ServiceMeta } from '../../metering/service-meta.ts';

/** `_service` of an answer, and the same serialised for appending to a prebuilt body. */
export interface ServiceBlock {
  service: ServiceMeta;
  json: string;
  /** Bodies already built with this block, by what they were built from (a quote). */
  bodies: WeakMap<object, Buffer>;
}

/**
 * `_service` of callers that present no credential, read once per turn of the event loop per
 * caller: under load one address sends many quotes at once, and each peeked the same counters and
 * serialised the same block. A block read in this turn is as live as one read for each request:
 * every request handled in the turn had arrived before the turn began, so the read falls within
 * its lifetime, and the next turn reads afresh (an unsettled read is never joined from a later turn).
 */
export class TurnPeeks {
  private readonly blocks = new Map<string, Promise<ServiceBlock>>();
  /** The blocks of this turn that have been read: a request can take one without awaiting. */
  private readonly ready = new Map<string, ServiceBlock>();
  private clearing = false;
  private readonly clear = () => {
    this.blocks.clear();
    this.ready.clear();
    this.clearing = false;
  };

  constructor(private readonly quota: QuotaMeter) {}

  of(caller: Caller): Promise<ServiceBlock> {
    // Only a caller without any credential has an auth block fixed by its address alone.
    if (caller.auth.presented) return this.read(caller);
    const id = caller.subject.id;
    let block = this.blocks.get(id);
    if (block === undefined) {
      const reading = this.read(caller);
      block = reading;
      this.blocks.set(id, reading);
      // Only while it is still this turn's read: a read settling after the turn ended is not kept.
      reading.then(
        (read) => {
          if (this.blocks.get(id) === reading) this.ready.set(id, read);
        },
        () => undefined,
      );
      if (!this.clearing) {
        this.clearing = true;
        setImmediate(this.clear);
      }
    }
    return block;
  }

  /**
   * The caller's block when this turn has already read it, without a promise (the quotes after
   * the first of a turn are then answered with no asynchronous hop); undefined otherwise, and
   * always for a caller that presented a credential.
   */
  settled(caller: Caller): ServiceBlock | undefined {
    return caller.auth.presented ? undefined : this.ready.get(caller.subject.id);
  }

  private read(caller: Caller): Promise<ServiceBlock> {
    return undebitedService(this.quota, caller).then((service) => ({
      service,
      json: JSON.stringify(service),
      bodies: new WeakMap(),
    }));
  }
}
