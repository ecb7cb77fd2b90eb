"""The profile dialog (`f`): save a TOML profile, write a `--models-preset` INI section, load a
profile, import a pasted llama-server command line. Dismisses with the Settings to show, or None."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static, TabbedContent, TabPane, TextArea

from tui.core.options.settings import Settings
from tui.ui.profiles.controller import ProfilesController
from tui.ui.widgets.inputs import TextBox, TextInput


class ProfileDialog(ModalScreen[Settings | None]):
    DEFAULT_CSS = """
    ProfileDialog { align: center middle; }
    ProfileDialog > #profile-box { width: 100; max-width: 100%; height: auto; max-height: 100%; border: round $primary; background: $surface; }
    ProfileDialog #profile-box > TabbedContent { height: auto; }
    ProfileDialog TabPane { height: auto; }
    ProfileDialog #profile-hint { color: $foreground-muted; padding: 0 1; }
    ProfileDialog TabPane { padding: 0 1; }
    ProfileDialog Label { margin-top: 1; }
    ProfileDialog Input { width: 1fr; }
    ProfileDialog .buttons { height: 3; margin-top: 1; }
    ProfileDialog Button { margin-right: 1; }
    ProfileDialog #import-text { height: 8; }
    ProfileDialog #profile-list { height: 8; }
    ProfileDialog #profile-result { height: auto; padding: 0 1; color: $success; }
    ProfileDialog #profile-result.-error { color: $error; }
    """
    BINDINGS = [Binding("escape", "close", "Close", id="profiles_screen.close")]

    def __init__(self, profiles: ProfilesController, settings: Settings) -> None:
        super().__init__()
        self.profiles = profiles
        self.settings = settings

    def compose(self) -> ComposeResult:
        with Vertical(id="profile-box") as box:
            box.border_title = "Profiles"
            with TabbedContent(id="profile-tabs"):
                with TabPane("Save TOML", id="tab-save"):
                    yield Label("Profile name (saved under the config dir; the API key is never written)")
                    yield TextInput(placeholder="e.g. laptop-mtp-n2", id="save-name")
                    with Horizontal(classes="buttons"):
                        yield Button("Save profile", id="save", variant="primary")
                with TabPane("Write INI section", id="tab-ini"):
                    yield Label("--models-preset file (created if missing; other sections are kept, a .bak is written)")
                    yield TextInput(placeholder="~/llama/models.ini", id="ini-path")
                    yield Label("Section (the model name clients ask for)")
                    yield TextInput(placeholder="qwen-mtp", id="ini-section")
                    with Horizontal(classes="buttons"):
                        yield Button("Write section", id="write-ini", variant="primary")
                with TabPane("Load", id="tab-load"):
                    yield OptionList(id="profile-list")
                    with Horizontal(classes="buttons"):
                        yield Button("Load selected", id="load", variant="primary")
                with TabPane("Import command line", id="tab-import"):
                    yield Label("Paste a llama-server command line (quotes and \\ continuations are fine)")
                    yield TextBox(id="import-text", soft_wrap=True, show_line_numbers=False)
                    with Horizontal(classes="buttons"):
                        yield Button("Import", id="import", variant="primary")
            yield Static("", id="profile-result")
            yield Static("Esc closes · Tab moves between fields · ←/→ on the tabs switch pages", id="profile-hint")

    def on_mount(self) -> None:
        names, error = self.profiles.list_profiles()
        option_list = self.query_one("#profile-list", OptionList)
        option_list.add_options(names or [])
        if error:
            self._result(error, error=True)
        self.query_one("#save-name", Input).focus()

    def _result(self, text: str, error: bool = False) -> None:
        result = self.query_one("#profile-result", Static)
        result.update(Content(text))
        result.set_class(error, "-error")

    @on(Button.Pressed, "#save")
    @on(Input.Submitted, "#save-name")
    def _save(self) -> None:
        name = self.query_one("#save-name", Input).value.strip()
        message, ok = self.profiles.save_profile(name, self.settings)
        self._result(message, error=not ok)

    @on(Button.Pressed, "#write-ini")
    @on(Input.Submitted, "#ini-section")
    def _write_ini(self) -> None:
        path = self.query_one("#ini-path", Input).value.strip()
        section = self.query_one("#ini-section", Input).value.strip()
        message, ok = self.profiles.write_ini_section(path, section, self.settings)
        self._result(message, error=not ok)

    @on(Button.Pressed, "#load")
    @on(OptionList.OptionSelected, "#profile-list")
    def _load(self) -> None:
        option_list = self.query_one("#profile-list", OptionList)
        if option_list.highlighted is None:
            self._result("choose a profile first (arrow keys, then Enter)", error=True)
            return
        name = str(option_list.get_option_at_index(option_list.highlighted).prompt)
        settings, message = self.profiles.load_profile(name)
        if settings is None:
            self._result(message, error=True)
            return
        self.dismiss(settings)

    @on(Button.Pressed, "#import")
    def _import(self) -> None:
        text = self.query_one("#import-text", TextArea).text
        settings, message, ok = self.profiles.import_command(text, self.settings)
        if settings is None or not ok:
            self._result(message, error=True)
            return
        if message:
            self.notify(message, title="Imported with warnings", severity="warning", timeout=10)
        self.dismiss(settings)

    def action_close(self) -> None:
        self.dismiss(None)
