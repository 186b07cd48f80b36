// Element Plus types a table's rows as Record<PropertyKey, any> whatever `data` holds; this
// restores the element type where a row is handed to typed code.
export function rowAs<T>(row: unknown): T {
  return row as T
}
