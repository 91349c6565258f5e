//! Drawing primitives of the charts: log-log line charts, grouped bar panels and their layouts,
//! axis labels and ticks, wrapped notes.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Area, COLOURS, FONT, Res, SIZE};
/// A number as an axis label: no trailing zeros, thousands as "1,000".
pub fn label(v: f64) -> String {
    if v >= 1000.0 && v.fract() == 0.0 {
        let s = format!("{v:.0}");
        let (head, tail) = s.split_at(s.len() - 3);
        format!("{head},{tail}")
    } else if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Powers of ten and their 2 and 5 multiples within `lo..=hi`: key points of a log axis.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v >= lo * 0.999 && v <= hi * 1.001 {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub colour: RGBColor,
    pub dashed: bool,
}

/// Draws lines over log-log axes; false if no line has a point.
pub fn log_log_chart(
    root: &Area,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
) -> Res<bool> {
    let all: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|l| l.points.iter().copied())
        .filter(|&(x, y)| x > 0.0 && y > 0.0)
        .collect();
    if all.is_empty() {
        return Ok(false);
    }
    let (mut xs, ys): (Vec<f64>, Vec<f64>) = all.iter().copied().unzip();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (x_lo, x_hi) = (xs[0] / 1.3, xs[xs.len() - 1] * 1.3);
    let y_min = ys.iter().copied().fold(f64::INFINITY, f64::min);
    let y_max = ys.iter().copied().fold(0.0, f64::max);
    let (y_lo, y_hi) = (y_min / 1.6, y_max * 1.6);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x_lo..x_hi).log_scale().with_key_points(xs.clone()),
            (y_lo..y_hi)
                .log_scale()
                .with_key_points(log_ticks(y_lo, y_hi)),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| label(*v))
        .y_label_formatter(&|v| label(*v))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;
    for line in lines.iter().filter(|l| !l.points.is_empty()) {
        let style = ShapeStyle::from(&line.colour).stroke_width(2);
        let points = line.points.iter().copied();
        let series = if line.dashed {
            chart.draw_series(DashedLineSeries::new(points, 8, 5, style))?
        } else {
            chart.draw_series(LineSeries::new(points, style))?
        };
        series
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart.draw_series(
            line.points
                .iter()
                .map(|&p| Circle::new(p, 3, line.colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(true)
}

/// Grouped bars: one group per category, one bar per series (`None`: no bar). Values are written
/// above their bars with `fmt`.
pub fn bar_panel(
    area: &Area,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
    fmt: &dyn Fn(f64) -> String,
) -> Res {
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .fold(0.0, f64::max);
    let y_hi = if top > 0.0 { top * 1.2 } else { 1.0 };
    let n = categories.len() as f64;
    let lines = categories
        .iter()
        .map(|c| c.lines().count())
        .max()
        .unwrap_or(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(25 + 15 * lines as u32)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_hi)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_desc(y_desc)
        .y_label_formatter(&|v| label(*v))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;
    // The categories under their groups (the axis' own labels fall on round numbers), a line
    // per `\n`.
    let below = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Top));
    chart.draw_series(categories.iter().enumerate().flat_map(|(i, name)| {
        let below = &below;
        name.split('\n').enumerate().map(move |(k, line)| {
            let offset = (0, 8 + 15 * k as i32);
            EmptyElement::at((i as f64, 0.0)) + Text::new(line.to_string(), offset, below.clone())
        })
    }))?;
    let width = 0.8 / series.len().max(1) as f64;
    for (s, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let x0 = |i: usize| i as f64 - 0.4 + s as f64 * width;
        let bars = values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| Rectangle::new([(x0(i), 0.0), (x0(i) + width * 0.92, v)], colour.filled()))
        });
        chart
            .draw_series(bars)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        let text = values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                Text::new(
                    fmt(v),
                    (x0(i) + width * 0.46, v),
                    TextStyle::from((FONT, 12)).pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            })
        });
        chart.draw_series(text)?;
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()?;
    }
    Ok(())
}

/// Two bar panels side by side under one title.
pub fn two_panels(root: &Area, title: &str, draw: impl FnOnce(&Area, &Area) -> Res) -> Res {
    let root = root.titled(title, (FONT, 22))?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    draw(&left, &right)
}

/// Two bar panels, one above the other, under one title.
pub fn two_rows(root: &Area, title: &str, draw: impl FnOnce(&Area, &Area) -> Res) -> Res {
    let root = root.titled(title, (FONT, 22))?;
    let height = root.dim_in_pixel().1;
    let (top, bottom) = root.split_vertically(height / 2);
    draw(&top, &bottom)
}

/// Three bar panels side by side under one title.
pub fn three_panels(
    root: &Area,
    title: &str,
    draw: impl FnOnce(&Area, &Area, &Area) -> Res,
) -> Res {
    let root = root.titled(title, (FONT, 22))?;
    let (left, rest) = root.split_horizontally(SIZE.0 / 3);
    let (middle, right) = rest.split_horizontally(SIZE.0 / 3);
    draw(&left, &middle, &right)
}

/// `text` in lines of at most about `width` characters, broken between words.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}
