"""What every view shares (ipywidgets only, no custom JavaScript): a static HTML picture of
its current state in its output (`_repr_mimebundle_`), so GitHub, nbviewer and a notebook that
was not run show the picture instead of the widget's repr; and, for the steppers, one control
row: play/pause, stop (stays where it is), back, step, a speed menu and a slider with a minimum
width, on a full-width row of its own above the picture, which scrolls inside a box of bounded
height so the controls stay in view.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from paged_kv.widgets.theme import CARD, FONT, INK, esc

SPEEDS = [("slow (1.5 s)", 1500), ("normal (0.8 s)", 800), ("fast (0.3 s)", 300),
          ("fastest (0.1 s)", 100)]  # fmt: skip
# Play's own stop button jumps back to the first step; ours pauses where it is.
CONTROLS_CSS = (
    "<style>.paged-kv-controls .widget-play > button:nth-of-type(2){display:none}"
    ".paged-kv-controls .widget-slider .slider-container{min-width:160px}</style>"
)


def caption_html(text: str) -> str:
    """A caption line on the card's own background, readable in any page theme (with the
    controls' style rule: a caption sits under the controls in every stepper)."""
    return (
        f'{CONTROLS_CSS}<div class="paged-kv-caption" style="background:{CARD};color:{INK};'
        f'padding:4px 8px;border:1px solid #c8c8c8;border-radius:6px;{FONT}">{text}</div>'
    )


class StaticPicture:
    """A widget whose output also holds a static HTML picture of what it shows now."""

    def static_html(self) -> str:
        raise NotImplementedError

    def _static_note(self) -> str:
        return ""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        # a mixin: the ipywidgets class it is mixed into (before it in each view's bases, e.g.
        # `class PoolGrid(StaticPicture, widgets.VBox)`) has the method; the checker sees object
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if not bundle:
            return bundle
        note = self._static_note()
        bundle["text/html"] = self.static_html() + (caption_html(esc(note)) if note else "")
        bundle["text/plain"] = f"{type(self).__name__}: {note or 'run the notebook to interact'}"
        return bundle


class Stepper(StaticPicture, widgets.VBox):
    """Play / stop / back / step / speed / slider over `num_states` recorded states."""

    def __init__(self, num_states: int, body: list[widgets.Widget], start: int = 0) -> None:
        last = num_states - 1
        start = max(0, min(start, last))
        self.slider = widgets.IntSlider(
            value=start, min=0, max=last, description="step",
            layout=widgets.Layout(min_width="300px", flex="1 1 300px"),
            style={"description_width": "36px"},
        )  # fmt: skip
        self.play = widgets.Play(
            value=start, min=0, max=last, interval=800, description="play", show_repeat=False
        )
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        button = widgets.Layout(width="auto")
        self.stop_button = widgets.Button(description="■ stop", tooltip="stop here", layout=button)
        self.back_button = widgets.Button(description="◀ back", tooltip="previous", layout=button)
        self.step_button = widgets.Button(description="step ▶", tooltip="next", layout=button)
        self.speed = widgets.Dropdown(
            options=SPEEDS, value=800, description="speed", layout=widgets.Layout(width="200px"),
            style={"description_width": "44px"},
        )  # fmt: skip
        self.caption = widgets.HTML()
        self.stop_button.on_click(lambda _: self.stop())
        self.back_button.on_click(lambda _: self.back())
        self.step_button.on_click(lambda _: self.step())
        self.speed.observe(lambda change: setattr(self.play, "interval", change["new"]), "value")
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        self.controls = widgets.HBox(
            [self.play, self.stop_button, self.back_button, self.step_button, self.speed,
             self.slider],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )  # fmt: skip
        self.controls.add_class("paged-kv-controls")
        self.body = widgets.VBox(
            body, layout=widgets.Layout(max_height="75vh", overflow="hidden auto")
        )
        super().__init__([self.controls, self.caption, self.body])
        self._num_states = num_states
        self._show(start)

    @property
    def position(self) -> int:
        """Index of the state shown (0 is the start)."""
        return self.slider.value

    def step(self) -> None:
        """Show the next state."""
        self.slider.value = min(self.slider.value + 1, self.slider.max)

    def back(self) -> None:
        """Show the previous state."""
        self.slider.value = max(self.slider.value - 1, 0)

    def stop(self) -> None:
        """Stop playing and stay on the state shown."""
        self.play.playing = False

    def _show(self, k: int) -> None:
        raise NotImplementedError  # each stepper draws its own states

    def _static_note(self) -> str:
        return (
            f"a static picture of step {self.position} of {self._num_states - 1}; "
            "run the notebook to step through"
        )

    def static_html(self) -> str:
        return self.caption.value + "".join(
            getattr(w, "value", "") for w in self.body.children if isinstance(w, widgets.HTML)
        )
