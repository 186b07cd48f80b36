// Sampled gateway events (docs/rules-contract.md §5, §8): newest first, filtered, and older
// pages through the cursor (the stream id to continue before).
import { http } from './http'
import type { EventPage, EventQuery, TollgateEvent } from './types'

export async function query(q: EventQuery, signal?: AbortSignal): Promise<EventPage> {
  const env = await http.envelope<TollgateEvent[] | null>('GET', '/api/v1/events', { query: { ...q }, signal })
  const events = env.data ?? []
  let next = env.meta?.next_cursor || undefined
  // a server that gives no cursor: a full page continues before its oldest entry
  if (next === undefined && env.meta?.next_cursor === undefined && q.limit !== undefined &&
    events.length >= q.limit) {
    next = events[events.length - 1]?.id
  }
  return { events, next_cursor: next }
}
