//! Heat maps of the cost matrices (feature `plot`, on by default), as in the Smelt
//! paper's Figure 6: `send` and `receive` side by side, sender CPU down, receiver
//! CPU across, one shared color scale (viridis-like, dark = cheap, yellow =
//! expensive) with a labelled color bar.
//!
//! Drawn with `plotters` into memory and written as PNG atomically. Text uses the
//! first TrueType font found under the usual system font directories (fontconfig's
//! dependencies put DejaVu there on Debian); with no font at all the picture is
//! still drawn, without labels.

use crate::{write_atomic, Model, ModelError};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The family name the heat map registers its font under.
const FAMILY: &str = "smelt-sans";

/// Registers a system TrueType font with plotters once; true when one was found.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        for path in font_candidates() {
            if let Ok(bytes) = std::fs::read(&path) {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Known sans-serif fonts first, then any `.ttf` under the system font directories.
fn font_candidates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
        "/Library/Fonts/Arial.ttf",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.is_file())
    .collect();
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        if depth > 4 || out.len() > 64 {
            return;
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, depth + 1, out);
            } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")) {
                out.push(p);
            }
        }
    }
    for dir in ["/usr/share/fonts", "/usr/local/share/fonts"] {
        walk(Path::new(dir), 0, &mut v);
    }
    v
}

/// Viridis-like color map, `t` in [0, 1].
pub fn colormap(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 9] = [
        (68, 1, 84),
        (71, 44, 122),
        (59, 81, 139),
        (44, 113, 142),
        (33, 144, 141),
        (39, 173, 129),
        (92, 200, 99),
        (170, 220, 50),
        (253, 231, 37),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (STOPS.len() - 1) as f64;
    let k = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - k as f64;
    let (a, b) = (STOPS[k], STOPS[k + 1]);
    let mix = |p: u8, q: u8| (p as f64 + (q as f64 - p as f64) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// "Nice" tick values covering [lo, hi] (about `count` of them).
fn ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / count.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut v = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 {
        v.push(t);
        t += step;
    }
    v
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ModelError {
    ModelError::Other(format!("drawing the heat map failed: {e}"))
}

/// The most cells drawn per side of a panel.
const MAX_CELLS: usize = 512;

/// Mean of the off-diagonal finite entries of block (bi, bj) of side `step`; `None`
/// for a block that holds only the diagonal.
fn block_mean(m: &[Vec<f64>], bi: usize, bj: usize, step: usize) -> Option<f64> {
    let n = m.len();
    let (mut s, mut k) = (0.0, 0usize);
    for (i, row) in m
        .iter()
        .enumerate()
        .take(((bi + 1) * step).min(n))
        .skip(bi * step)
    {
        for (j, &v) in row
            .iter()
            .enumerate()
            .take(((bj + 1) * step).min(n))
            .skip(bj * step)
        {
            if i != j && v.is_finite() {
                s += v;
                k += 1;
            }
        }
    }
    (k > 0).then(|| s / k as f64)
}

/// Renders the heat map and returns the PNG bytes.
pub fn render_png(model: &Model) -> Result<Vec<u8>, ModelError> {
    let n = model.len();
    if n == 0 {
        return Err(ModelError::Other("the model has no CPU to draw".into()));
    }
    // Up to MAX_CELLS cells per side; bigger models are drawn in blocks of `step`
    // CPUs (block color = mean cost of the block) so the picture stays bounded.
    let step = n.div_ceil(MAX_CELLS);
    let nb = n.div_ceil(step);
    let cell = (640 / nb as u32).max(1);
    let p = cell * nb as u32; // panel side, px
    let (left, top, bottom, gap, bar_gap, bar_w, right) =
        (70u32, 70u32, 60u32, 50u32, 30u32, 24u32, 80u32);
    let w = left + p + gap + left + p + bar_gap + bar_w + right;
    let h = top + p + bottom;
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for m in [&model.send, &model.receive] {
        for (i, row) in m.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if i != j && v.is_finite() {
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
            }
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    // Labels are drawn while a font works; if text drawing fails (no font, or a
    // plotters build whose font backend cannot find ours) the rest is still drawn.
    let text = std::cell::Cell::new(font_ready());
    let mut buf = vec![255u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let font = |size: u32| (FAMILY, size).into_font().color(&BLACK);
        let label = |s: &str, x: i32, y: i32, size: u32, anchor: (HPos, VPos)| {
            if text.get() {
                let style = font(size).pos(Pos::new(anchor.0, anchor.1));
                if root.draw(&Text::new(s.to_string(), (x, y), style)).is_err() {
                    text.set(false);
                }
            }
            Ok::<(), ModelError>(())
        };
        let title = format!(
            "{} ({}): {} CPUs, costs in ns{}",
            model.provenance.host,
            model.provenance.method,
            n,
            if step > 1 {
                format!(", each cell the mean of {step}x{step} CPU pairs")
            } else {
                String::new()
            }
        );
        label(&title, 10, 8, 18, (HPos::Left, VPos::Top))?;
        let tick_every = {
            let want = (nb / 16).max(1);
            [1usize, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100]
                .into_iter()
                .find(|&s| s >= want)
                .unwrap_or(want)
        };
        for (k, (name, m)) in [("send", &model.send), ("receive", &model.receive)]
            .into_iter()
            .enumerate()
        {
            let x0 = (left + k as u32 * (p + gap + left)) as i32;
            let y0 = top as i32;
            label(
                &format!("{name}[sender][receiver]"),
                x0 + p as i32 / 2,
                y0 - 26,
                16,
                (HPos::Center, VPos::Bottom),
            )?;
            for i in 0..nb {
                for j in 0..nb {
                    let color = match block_mean(m, i, j, step) {
                        None => RGBColor(200, 200, 200),
                        Some(v) => colormap((v - lo) / (hi - lo)),
                    };
                    let (cx, cy) = (x0 + (j as u32 * cell) as i32, y0 + (i as u32 * cell) as i32);
                    if cell == 1 {
                        root.draw_pixel((cx, cy), &color).map_err(draw_err)?;
                    } else {
                        root.draw(&Rectangle::new(
                            [(cx, cy), (cx + cell as i32, cy + cell as i32)],
                            color.filled(),
                        ))
                        .map_err(draw_err)?;
                    }
                }
            }
            root.draw(&Rectangle::new(
                [(x0 - 1, y0 - 1), (x0 + p as i32, y0 + p as i32)],
                BLACK.stroke_width(1),
            ))
            .map_err(draw_err)?;
            for idx in (0..nb).step_by(tick_every) {
                let c = model.cpus[idx * step].to_string();
                let mid = (idx as u32 * cell + cell / 2) as i32;
                label(&c, x0 + mid, y0 - 4, 11, (HPos::Center, VPos::Bottom))?;
                label(&c, x0 - 5, y0 + mid, 11, (HPos::Right, VPos::Center))?;
            }
            label(
                "receiver CPU",
                x0 + p as i32 / 2,
                y0 + p as i32 + 10,
                13,
                (HPos::Center, VPos::Top),
            )?;
            for (text, dy) in [("sender", 10), ("CPU", 26)] {
                label(
                    text,
                    x0 - 8,
                    y0 + p as i32 + dy,
                    13,
                    (HPos::Right, VPos::Top),
                )?;
            }
        }
        // Color bar.
        let bx = (left + p + gap + left + p + bar_gap) as i32;
        let by = top as i32;
        for y in 0..p {
            let t = 1.0 - y as f64 / (p - 1).max(1) as f64;
            root.draw(&Rectangle::new(
                [(bx, by + y as i32), (bx + bar_w as i32, by + y as i32 + 1)],
                colormap(t).filled(),
            ))
            .map_err(draw_err)?;
        }
        root.draw(&Rectangle::new(
            [(bx - 1, by - 1), (bx + bar_w as i32, by + p as i32)],
            BLACK.stroke_width(1),
        ))
        .map_err(draw_err)?;
        label(
            "ns",
            bx + bar_w as i32 / 2,
            by - 8,
            13,
            (HPos::Center, VPos::Bottom),
        )?;
        for t in ticks(lo, hi, 6) {
            let y = by + ((1.0 - (t - lo) / (hi - lo)) * (p - 1) as f64).round() as i32;
            root.draw(&PathElement::new(
                vec![(bx + bar_w as i32, y), (bx + bar_w as i32 + 4, y)],
                BLACK,
            ))
            .map_err(draw_err)?;
            let s = if hi - lo >= 20.0 {
                format!("{t:.0}")
            } else {
                format!("{t:.1}")
            };
            label(&s, bx + bar_w as i32 + 7, y, 11, (HPos::Left, VPos::Center))?;
        }
        root.present().map_err(draw_err)?;
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&buf, w, h, image::ColorType::Rgb8)
        .map_err(|e| ModelError::Other(format!("encoding the heat map as PNG failed: {e}")))?;
    Ok(png)
}

use image::ImageEncoder;

/// Renders the heat map and writes it to `path` atomically (no partial file on
/// failure).
pub fn save_png(model: &Model, path: &Path) -> Result<(), ModelError> {
    let png = render_png(model)?;
    write_atomic(path, &png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colormap_ends_and_ticks() {
        assert_eq!(colormap(0.0), RGBColor(68, 1, 84));
        assert_eq!(colormap(1.0), RGBColor(253, 231, 37));
        assert_eq!(colormap(f64::NAN), colormap(0.0));
        assert_eq!(
            ticks(0.0, 100.0, 5),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(ticks(13.0, 14.0, 4), vec![13.0, 13.25, 13.5, 13.75, 14.0]);
    }

    #[test]
    fn renders_a_png() {
        let m = crate::synthetic(2, 3, 10.0, 30.0, 4.0);
        let png = render_png(&m).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.png");
        save_png(&m, &p).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
    }

    #[test]
    fn big_models_are_drawn_in_blocks() {
        let m = crate::synthetic(2, 260, 10.0, 30.0, 4.0);
        let png = render_png(&m).unwrap();
        // IHDR width/height: 520 CPUs in blocks of 2 = 260 cells of 2 px.
        let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!(h, 70 + 520 + 60, "{w}x{h}");
        assert_eq!(block_mean(&m.send, 0, 0, 2), Some(10.0));
        assert_eq!(block_mean(&[vec![0.0]], 0, 0, 1), None);
    }
}
