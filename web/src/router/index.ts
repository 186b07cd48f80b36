// Routes: every view is loaded on demand; the shell (menu, header, live connection) wraps the
// signed-in views. `meta.permission` hides a route from roles that lack it.
import { createRouter, createWebHistory, type RouteRecordRaw, type Router } from 'vue-router'
import { useAuthStore } from '@/stores/auth'
import type { Permission } from '@/utils/permissions'

declare module 'vue-router' {
  interface RouteMeta {
    public?: boolean
    title?: string
    permission?: Permission
  }
}

export const routes: RouteRecordRaw[] = [
  { path: '/login', name: 'login', component: () => import('@/views/LoginView.vue'),
    meta: { public: true, title: 'Sign in' } },
  {
    path: '/',
    component: () => import('@/components/layout/AppShell.vue'),
    children: [
      { path: '', name: 'dashboard', component: () => import('@/views/DashboardView.vue'),
        meta: { title: 'Dashboard' } },
      { path: 'apps', name: 'apps', component: () => import('@/views/apps/AppListView.vue'),
        meta: { title: 'Applications' } },
      { path: 'apps/new', name: 'app-new', component: () => import('@/views/apps/AppFormView.vue'),
        meta: { title: 'New application', permission: 'config:write' } },
      { path: 'apps/:id', name: 'app-detail', component: () => import('@/views/apps/AppDetailView.vue'),
        props: true, meta: { title: 'Application' } },
      { path: 'apps/:id/edit', name: 'app-edit', component: () => import('@/views/apps/AppFormView.vue'),
        props: true, meta: { title: 'Edit application', permission: 'config:write' } },
      { path: 'rules', name: 'rules', component: () => import('@/views/rules/RuleListView.vue'),
        meta: { title: 'Rules' } },
      { path: 'rules/new', name: 'rule-new', component: () => import('@/views/rules/RuleFormView.vue'),
        meta: { title: 'New rule', permission: 'config:write' } },
      { path: 'rules/:id/edit', name: 'rule-edit', component: () => import('@/views/rules/RuleFormView.vue'),
        props: true, meta: { title: 'Edit rule', permission: 'config:write' } },
      { path: 'breakers', name: 'breakers', component: () => import('@/views/BreakersView.vue'),
        meta: { title: 'Circuit breakers' } },
      { path: 'alerts', name: 'alerts', component: () => import('@/views/AlertsView.vue'),
        meta: { title: 'Alerts' } },
      { path: 'events', name: 'events', component: () => import('@/views/EventsView.vue'),
        meta: { title: 'Events' } },
      { path: 'clusters', name: 'clusters', component: () => import('@/views/ClustersView.vue'),
        meta: { title: 'Clusters' } },
      { path: 'connections', name: 'connections', component: () => import('@/views/ConnectionsView.vue'),
        meta: { title: 'Connections' } },
      { path: 'emergency', name: 'emergency', component: () => import('@/views/EmergencyView.vue'),
        meta: { title: 'Emergency mode' } },
      { path: 'settings', name: 'settings', component: () => import('@/views/SettingsView.vue'),
        meta: { title: 'Settings' } },
    ],
  },
  { path: '/:pathMatch(.*)*', name: 'not-found', component: () => import('@/views/NotFoundView.vue'),
    meta: { public: true, title: 'Not found' } },
]

export function createAppRouter(): Router {
  const router = createRouter({
    history: createWebHistory(),
    routes,
    // a hash (e.g. /#alerts, the dashboard's alerts card) scrolls below the sticky header
    scrollBehavior: (to, _from, saved) => saved ?? (to.hash ? { el: to.hash, top: 64 } : { top: 0 }),
  })
  router.beforeEach(async (to) => {
    const auth = useAuthStore()
    if (to.meta.public) {
      if (to.name === 'login' && (auth.loggedIn || await auth.restore())) {
        const next = typeof to.query.redirect === 'string' ? to.query.redirect : '/'
        return next.startsWith('/') && !next.startsWith('//') ? next : '/'
      }
      return true
    }
    if (!auth.loggedIn && !(await auth.restore())) {
      return { name: 'login', query: to.fullPath === '/' ? {} : { redirect: to.fullPath } }
    }
    if (to.meta.permission && !auth.can(to.meta.permission)) {
      return { name: 'dashboard' }
    }
    return true
  })
  router.afterEach((to) => {
    document.title = to.meta.title ? `${to.meta.title} · tollgate` : 'tollgate'
  })
  return router
}
