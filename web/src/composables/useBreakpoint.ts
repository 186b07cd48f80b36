// Phone-width layout switch (Req 22.8): true below 768 px.
import { getCurrentScope, onScopeDispose, ref, type Ref } from 'vue'

export const PHONE_QUERY = '(max-width: 767px)'

export function useIsPhone(): Readonly<Ref<boolean>> {
  const mq = typeof window !== 'undefined' && window.matchMedia ? window.matchMedia(PHONE_QUERY) : null
  const phone = ref(mq?.matches ?? false)
  if (mq) {
    const on = (e: MediaQueryListEvent) => { phone.value = e.matches }
    mq.addEventListener('change', on)
    if (getCurrentScope()) onScopeDispose(() => mq.removeEventListener('change', on))
  }
  return phone
}
