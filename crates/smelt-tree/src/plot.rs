//! Grouped bar charts (speedup per machine and topology, Figure 9 style), drawn
//! with plotters as SVG or PNG. Text layout needs a TrueType font from the usual
//! system directories (e.g. Debian's DejaVu, pulled in by fontconfig).

use crate::Error;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;
use std::sync::OnceLock;

/// A grouped bar chart: one group of bars per entry of `groups`, one bar per
/// series in each group.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Caption.
    pub title: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Group labels along x (e.g. machine names).
    pub groups: Vec<String>,
    /// (series name, one value per group).
    pub series: Vec<(String, Vec<f64>)>,
    /// A horizontal reference line (e.g. speedup 1.0), if any.
    pub reference: Option<f64>,
}

const FAMILY: &str = "sans-serif";

fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let candidates = [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
        ];
        for p in candidates {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps registered fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// A group label short enough to sit under its bars.
fn short(s: &str) -> String {
    const MAX: usize = 18;
    let spaced = s.replace(['_', '-'], " ");
    let words: Vec<&str> = spaced
        .split_whitespace()
        .filter(|w| !matches!(*w, "R" | "TM" | "CPU" | "Processor" | "Intel" | "Core"))
        .filter(|w| !w.contains("GHz"))
        .collect();
    let t = words.join(" ");
    if t.chars().count() <= MAX {
        t.to_string()
    } else {
        t.chars().take(MAX - 1).collect::<String>() + "…"
    }
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The message of a failed drawing step.
fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    format!("drawing failed: {e}")
}

/// Draws the legend of `chart` (upper left) and writes the picture out.
fn finish<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 13))
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &BarChart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let ng = c.groups.len().max(1);
    let ymax = c
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .chain(c.reference)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        * 1.15;
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let groups = c.groups.clone();
    let mut chart = ChartBuilder::on(&root)
        .caption(&c.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..ng as f64, 0f64..ymax)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(ng * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 && i < groups.len() {
                short(&groups[i])
            } else {
                String::new()
            }
        })
        .x_label_style((FAMILY, 11))
        .y_desc(&c.y_label)
        .label_style((FAMILY, 13))
        .draw()
        .map_err(draw_err)?;
    let ns = c.series.len().max(1);
    let width = 0.8 / ns as f64;
    for (si, (name, vals)) in c.series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        chart
            .draw_series(
                vals.iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(g, &v)| {
                        let x0 = g as f64 + 0.1 + si as f64 * width;
                        Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], color.filled())
                    }),
            )
            .map_err(draw_err)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some(r) = c.reference {
        chart
            .draw_series(LineSeries::new(
                [(0.0, r), (ng as f64, r)],
                BLACK.stroke_width(1),
            ))
            .map_err(draw_err)?;
    }
    finish(&root, &mut chart)
}

/// Writes the chart to `path`: `.svg` or `.png` by extension.
pub fn render(c: &BarChart, path: &Path) -> Result<(), Error> {
    render_why(c, path).map_err(Error::Plot)
}

fn render_why(c: &BarChart, path: &Path) -> Result<(), String> {
    let w = (160 + 130 * c.groups.len().max(1) as u32).clamp(640, 3000);
    let size = (w, 560);
    let svg = check_target(path)?;
    atomic(path, svg, |tmp| {
        if svg {
            draw(SVGBackend::new(tmp, size).into_drawing_area(), c)
        } else {
            draw(BitMapBackend::new(tmp, size).into_drawing_area(), c)
        }
    })
}

/// A line chart: one line per series over shared x values (e.g. group sizes).
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Caption.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The x values shared by every series.
    pub x: Vec<f64>,
    /// (series name, one y per x).
    pub series: Vec<(String, Vec<f64>)>,
}

fn draw_lines<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &LineChart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let finite = |v: &f64| v.is_finite();
    let x0 =
        c.x.iter()
            .copied()
            .filter(finite)
            .fold(f64::INFINITY, f64::min);
    let x1 =
        c.x.iter()
            .copied()
            .filter(finite)
            .fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let ymax = c
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(finite)
        .fold(0.0f64, f64::max)
        * 1.1;
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(&c.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0f64..ymax)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .label_style((FAMILY, 13))
        .draw()
        .map_err(draw_err)?;
    for (si, (name, ys)) in c.series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let pts: Vec<(f64, f64)> =
            c.x.iter()
                .zip(ys)
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|(&x, &y)| (x, y))
                .collect();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(draw_err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    finish(&root, &mut chart)
}

/// Checks that `path` names an `.svg` or `.png` file (true for SVG) and that a font
/// is available to draw text with.
/// Draws into a temporary file next to `path` (with the same extension, which the
/// PNG encoder goes by), then renames it over `path` (see
/// [`smelt_model::files`]: never a partial file, never through a FIFO or device).
fn atomic(
    path: &Path,
    svg: bool,
    draw: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    smelt_model::write_atomic_with(path, if svg { ".svg" } else { ".png" }, draw)
        .map_err(|e| e.to_string())
}

fn check_target(path: &Path) -> Result<bool, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("svg") | Some("png")) {
        return Err(format!(
            "{}: the plot file must end in .svg or .png",
            path.display()
        ));
    }
    if !font_ready() {
        return Err(format!(
            "{}: no TrueType font found under /usr/share/fonts (install fonts-dejavu-core)",
            path.display()
        ));
    }
    Ok(ext.as_deref() == Some("svg"))
}

/// Writes a line chart to `path`: `.svg` or `.png` by extension.
pub fn render_lines(c: &LineChart, path: &Path) -> Result<(), Error> {
    render_lines_why(c, path).map_err(Error::Plot)
}

fn render_lines_why(c: &LineChart, path: &Path) -> Result<(), String> {
    let size = (1000, 600);
    let svg = check_target(path)?;
    atomic(path, svg, |tmp| {
        if svg {
            draw_lines(SVGBackend::new(tmp, size).into_drawing_area(), c)
        } else {
            draw_lines(BitMapBackend::new(tmp, size).into_drawing_area(), c)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_svg_and_rejects_other_names() {
        let dir = tempfile::tempdir().unwrap();
        let c = BarChart {
            title: "t".into(),
            y_label: "speedup".into(),
            groups: vec!["a".into(), "b".into()],
            series: vec![
                ("x".into(), vec![1.0, 2.0]),
                ("y".into(), vec![0.5, f64::NAN]),
            ],
            reference: Some(1.0),
        };
        let p = dir.path().join("p.svg");
        if font_ready() {
            render(&c, &p).unwrap();
            let s = std::fs::read_to_string(&p).unwrap();
            assert!(s.contains("<svg") && s.contains("<rect"));
            let png = dir.path().join("p.png");
            render(&c, &png).unwrap();
            assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
            let l = LineChart {
                title: "scaling".into(),
                x_label: "cpus".into(),
                y_label: "ns".into(),
                x: vec![2.0, 3.0, 4.0],
                series: vec![("a".into(), vec![1.0, 2.0, f64::NAN])],
            };
            let lp = dir.path().join("l.svg");
            render_lines(&l, &lp).unwrap();
            assert!(std::fs::read_to_string(&lp).unwrap().contains("<polyline"));
        } else {
            assert!(render(&c, &p).unwrap_err().to_string().contains("font"));
        }
        assert!(render(&c, &dir.path().join("p.gif")).is_err());
    }
}
