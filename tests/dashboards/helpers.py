"""Reading the dashboard the way a person does: the heatmap's pixels, a job's row."""

from __future__ import annotations

import colorsys
from typing import Any

# Colour of each aggregator cell of the heatmap canvas, by aggregator index, as [r, g, b].
_CELLS_JS = """(indices) => {
  const c = document.querySelector('#heatmap');
  const cell = Number(c.dataset.cell), cols = Number(c.dataset.cols);
  const scale = c.width / c.clientWidth;
  const ctx = c.getContext('2d');
  return indices.map((i) => {
    // A pixel inside the cell, clear of the white grid lines drawn on cell borders.
    const x = Math.floor(((i % cols) * cell + cell / 2) * scale);
    const y = Math.floor((Math.floor(i / cols) * cell + cell / 2) * scale);
    return Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3));
  });
}"""

# Every cell's colour and the legend's counts, read in one go so both come from the same frame.
_CENSUS_JS = """() => {
  const c = document.querySelector('#heatmap');
  const n = Number(c.dataset.aggregators), cell = Number(c.dataset.cell);
  const cols = Number(c.dataset.cols), scale = c.width / c.clientWidth;
  const image = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const cells = {};
  for (let i = 0; i < n; i += 1) {
    const x = Math.floor(((i % cols) * cell + cell / 2) * scale);
    const y = Math.floor((Math.floor(i / cols) * cell + cell / 2) * scale);
    const k = (y * c.width + x) * 4;
    const key = `${image[k]},${image[k + 1]},${image[k + 2]}`;
    cells[key] = (cells[key] || 0) + 1;
  }
  const legend = {};
  for (const li of document.querySelectorAll('#legend-jobs li[data-job-id]')) {
    const held = li.querySelector('.held').textContent.split(' ')[0];
    legend[li.dataset.jobId] = Number(held.replace(/,/g, ''));
  }
  return {cells, legend};
}"""

FREE_RGB = (226, 230, 236)


def heatmap_census(page: Any) -> tuple[dict[tuple[int, int, int], int], dict[int, int]]:
    """``({rgb: cells of that colour}, {job id: aggregators the legend says it holds})``."""
    census = page.evaluate(_CENSUS_JS)
    cells = {
        (int(r), int(g), int(b)): n
        for key, n in census["cells"].items()
        for r, g, b in [key.split(",")]
    }
    return cells, {int(k): v for k, v in census["legend"].items()}


def cell_colours(page: Any, indices: list[int]) -> list[tuple[int, int, int]]:
    return [tuple(c) for c in page.evaluate(_CELLS_JS, indices)]


def legend_rgb(page: Any, job_id: int) -> tuple[int, int, int]:
    """The legend swatch's colour for `job_id` (its full, 'complete' shade)."""
    css = page.locator(f'#legend-jobs li[data-job-id="{job_id}"] .swatch').evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
    r, g, b = (int(v) for v in css.removeprefix("rgb(").removesuffix(")").split(","))
    return r, g, b


def hue(rgb: tuple[int, int, int]) -> float:
    return colorsys.rgb_to_hls(*(v / 255 for v in rgb))[0] * 360


def same_hue(a: tuple[int, int, int], b: tuple[int, int, int], tolerance: float = 6) -> bool:
    """Partial (lighter) and flushed (darker) shades keep the job's hue."""
    d = abs(hue(a) - hue(b)) % 360
    return min(d, 360 - d) <= tolerance


def row_progress(page: Any, job_id: int) -> int:
    text = page.locator(f'#jobs-table tr[data-job-id="{job_id}"] .progress-text').inner_text()
    return int(text.split("/")[0])
