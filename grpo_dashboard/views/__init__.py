"""What the pages show, without gradio: chart data and figures, runs table, completions, spec diff."""
