//! What every chart tern draws (the pacer simulator's day, `tern load --plot`) needs before drawing: a font.
//! plotters' `ab_glyph` renderer finds fonts by family name and has none of its own, so [`register_fonts`]
//! makes a compiled-in one (Ubuntu Light, from `epaint_default_fonts`) every family's: PNG charts then need
//! no system font.

/// Registers the compiled-in font for every family plotters asks for; idempotent and cheap after the first
/// call.
pub fn register_fonts() {
    static FONTS: std::sync::Once = std::sync::Once::new();
    FONTS.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            // A known-good TTF: registering it cannot fail.
            let _ = plotters::style::register_font(
                family,
                plotters::style::FontStyle::Normal,
                epaint_default_fonts::UBUNTU_LIGHT,
            );
        }
    });
}
