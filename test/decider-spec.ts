import { expect } from 'vitest';
import type { DecidedEvent, Decider } from '../adapters/event-store/command.ts';

/**
 * Given / when / then for a decider, in the style of Emmett's DeciderSpecification: the state is
 * folded from the given events with the decider's own `evolve`, so a spec checks the rules as
 * the stream would see them.
 */
export function deciderSpec<State, Command, Event extends DecidedEvent>(
  decider: Decider<State, Command, Event>,
) {
  return {
    given(events: Event[]) {
      const state = events.reduce((s, e) => decider.evolve(s, e), decider.initialState());
      return {
        when(command: Command) {
          const run = () => decider.decide(command, state);
          return {
            thenEmits(expected: Event[]): void {
              expect(run()).toEqual(expected);
            },
            thenNothing(): void {
              expect(run()).toEqual([]);
            },
            thenThrows(check: (err: Error) => boolean): void {
              let thrown: unknown = null;
              try {
                run();
              } catch (err) {
                thrown = err;
              }
              expect(thrown, 'the command was expected to be refused').toBeInstanceOf(Error);
              expect(check(thrown as Error), `unexpected refusal: ${String(thrown)}`).toBe(true);
            },
          };
        },
      };
    },
  };
}
