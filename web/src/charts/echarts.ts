// The slice of ECharts the console uses, registered once on echarts/core (tree-shaken: no
// `import * from 'echarts'`). Only useChart imports this module, dynamically, so ECharts is a
// chunk of its own that loads with the first chart, never with the initial bundle.
import { LineChart, type LineSeriesOption } from 'echarts/charts'
import { GridComponent, LegendComponent, MarkLineComponent, MarkPointComponent, TooltipComponent,
  type GridComponentOption, type LegendComponentOption, type MarkLineComponentOption,
  type MarkPointComponentOption, type TooltipComponentOption } from 'echarts/components'
import { init, use, type ComposeOption, type ECharts } from 'echarts/core'
import { CanvasRenderer } from 'echarts/renderers'

use([LineChart, GridComponent, TooltipComponent, LegendComponent, MarkLineComponent,
  MarkPointComponent, CanvasRenderer])

export type ChartOption = ComposeOption<LineSeriesOption | GridComponentOption
  | TooltipComponentOption | LegendComponentOption | MarkLineComponentOption | MarkPointComponentOption>

export type { ECharts }

export function initChart(el: HTMLElement): ECharts {
  return init(el, undefined, { renderer: 'canvas' })
}
