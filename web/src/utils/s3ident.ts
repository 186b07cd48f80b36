// The access key and bucket name rules of the admin API, checked before a request is sent (the
// API checks them again and stays the authority).

/** AWS-style (AKIA…, 16–128 letters and digits) or MinIO/Ceph-style: 3–128 printable ASCII
 *  characters without '/', ',' or whitespace. */
export function accessKeyProblem(key: string): string | null {
  if (key.length < 3 || key.length > 128) return 'An access key id has 3 to 128 characters'
  if (!/^[\x21-\x7e]+$/.test(key)) return 'Printable ASCII characters only, no spaces'
  if (/[/,]/.test(key)) return "An access key id has no '/' or ','"
  return null
}

/** A secret access key: 16–128 printable ASCII characters without whitespace (AWS's have 40). */
export function secretProblem(secret: string): string | null {
  if (secret.length < 16 || secret.length > 128) return 'A secret access key has 16 to 128 characters'
  if (!/^[\x21-\x7e]+$/.test(secret)) return 'Printable ASCII characters only, no spaces'
  return null
}

/** S3's bucket naming rules. */
export function bucketProblem(b: string): string | null {
  if (b.length < 3 || b.length > 63) return 'A bucket name has 3 to 63 characters'
  if (!/^[a-z0-9][a-z0-9.-]*[a-z0-9]$/.test(b)) return 'Lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit'
  if (b.includes('..')) return 'No two dots in a row'
  if (/^\d+\.\d+\.\d+\.\d+$/.test(b)) return 'Not an IP address'
  if (/^(xn--|sthree-|amzn-s3-demo-)/.test(b) || /(-s3alias|--ol-s3|\.mrap|--x-s3)$/.test(b)) return 'A reserved prefix or suffix'
  return null
}
