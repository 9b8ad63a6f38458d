"""The set of scenarios a server knows: bundled ones, user directories, and added ones."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple, cast, final

from . import quoting
from .hints import did_you_mean
from .model import Scenario, Script
from .reader import Problem, ScenarioError, load_file, scenario_files

DEFAULT_SCENARIO = "hello"
LISTED_NAMES = 100  # of the known scenarios an error names; a server may hold 10,000 added ones
MAX_USE_CHAIN = 100  # `use` followed one after another to answer one request


class UnknownScenario(LookupError):
    """A name no scenario has: the message says the nearest one, if any is near, and lists the
    known ones (the first LISTED_NAMES, and how many more)."""

    def __init__(self, name: str, known: list[str]):
        listed = ", ".join(known[:LISTED_NAMES])
        more = (
            f" and {len(known) - LISTED_NAMES:,} more (`fakehop list --url URL` lists them all)"
            if len(known) > LISTED_NAMES
            else ""
        )
        super().__init__(f"Unknown scenario {name!r}{did_you_mean(name, known) or '.'} Known scenarios: {listed}{more}")
        self.name = name
        self.known = known


@final  # so that a choice that is not exactly a Pinned is a name
class Pinned(NamedTuple):
    """One entry of a sequence, queued: a queued sequence plays its whole run, entry by entry,
    whatever its counter says (and leaves the counter as it was)."""

    name: str
    number: int

    def __str__(self) -> str:
        return f"{self.name}[{self.number}]"


def bundled_directory() -> Path:
    """The bundled scenarios: inside the installed package, or beside it in a checkout."""
    packaged = Path(__file__).parent.parent / "scenarios"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent.parent / "scenarios"


def is_bundled(scenario: Scenario) -> bool:
    return Path(scenario.source).parent == bundled_directory()


def origin(scenario: Scenario) -> str:
    """Where a scenario came from, as `fakehop list` shows it: "bundled", or the file it was read from."""
    return "bundled" if is_bundled(scenario) else scenario.source


def _files_in(directory: Path, problems: list[Problem]) -> list[Path]:
    """The scenario files of `directory`; none, and a problem, when it is not a directory."""
    if not directory.is_dir():
        problems.append(Problem(str(directory), 0, "is not a directory"))
        return []
    return scenario_files(directory)


def _read_once(paths: list[Path], read: set[Path], problems: list[Problem]) -> Iterator[Scenario]:
    """The scenario of each of `paths` not in `read` (which gains them), their problems added to `problems`."""
    for path in paths:
        resolved = path.resolve()
        if resolved in read:
            continue
        read.add(resolved)
        try:
            yield load_file(path)
        except ScenarioError as exc:
            problems.extend(exc.problems)


@dataclass(frozen=True)
class Library:
    """Scenarios by name. Immutable: adding one makes a new Library."""

    scenarios: Mapping[str, Scenario]
    # As it was loaded: each scenario that took the name of one loaded before it, with that one.
    replaced: tuple[tuple[Scenario, Scenario], ...] = field(default=(), repr=False, compare=False)
    # What every request for a scenario that plays alike for every request (not a sequence or
    # a conversation, and quoting nothing) plays, by name, filled in as asked: the library
    # never changes, so it is worked out once. Read only by plays_alike, and by
    # Session.script_for first (two calls fewer for most requests).
    alike: dict[str | Pinned, tuple[str, Script]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, directories: Iterable[Path] = (), *, files: Iterable[Path] = (), bundled: bool = True) -> Library:
        """Bundled scenarios, then each directory in order, then each file: the one rule of
        `serve`, `validate`, `play`, `list` and the fixture. A later name wins (`replaced` says
        over what); a file already read (the bundled directory given again) is not read twice;
        every `use` must name a scenario of the whole. Raises ScenarioError listing every problem."""
        found: dict[str, Scenario] = {}
        replaced: list[tuple[Scenario, Scenario]] = []
        problems: list[Problem] = []
        read: set[Path] = set()
        directories = ([bundled_directory()] if bundled else []) + [Path(d) for d in directories]
        for paths in [_files_in(directory, problems) for directory in directories] + [[Path(f)] for f in files]:
            names_here: dict[str, str] = {}
            for scenario in _read_once(paths, read, problems):
                if scenario.name in names_here:
                    problems.append(
                        Problem(
                            scenario.source,
                            scenario.line,
                            f"name {scenario.name!r} is also used by {names_here[scenario.name]}",
                        )
                    )
                    continue
                names_here[scenario.name] = scenario.source
                if scenario.name in found:
                    replaced.append((scenario, found[scenario.name]))
                found[scenario.name] = scenario
        library = cls(found, tuple(replaced))
        problems.extend(library.reference_problems())
        if problems:
            raise ScenarioError(problems)
        return library

    def replacements(self) -> list[str]:
        """A line for each scenario that replaced another of its name as the library loaded."""
        return [
            f"{new.source} replaces the bundled scenario {old.name!r}"
            if is_bundled(old)
            else f"{new.source} replaces {old.source} (scenario {old.name!r})"
            for new, old in self.replaced
        ]

    def with_scenario(self, scenario: Scenario) -> Library:
        """A new library with `scenario` added or replaced; raises ScenarioError if its `use` breaks.
        This library's own `use` are known to resolve, so only the new scenario's are followed."""
        library = Library({**self.scenarios, scenario.name: scenario})
        problems = library.reference_problems(scenario.name)
        if problems:
            raise ScenarioError(problems)
        return library

    def names(self) -> list[str]:
        return sorted(self.scenarios)

    def __contains__(self, name: str) -> bool:
        return name in self.scenarios

    def __getitem__(self, name: str) -> Scenario:
        return self.scenarios[name]

    def reference_problems(self, added: str | None = None) -> list[Problem]:
        """Every `use` must name a known scenario and no chain of `use` may loop. With `added`,
        the library but that scenario is taken to be sound: its own `use` are checked, and the
        loops through it. The time is linear in the scenarios and `use` looked at."""
        component = self._loop_components(self.scenarios if added is None else (added,))
        problems = []
        for scenario in self.scenarios.values():
            if added is not None and scenario.name != added and scenario.name not in component:
                continue
            loop = component.get(scenario.name)
            for entry in scenario.entries:
                if entry.use is None:
                    continue
                if entry.use not in self.scenarios:
                    problems.append(
                        Problem(
                            scenario.source,
                            entry.line,
                            f"use: no scenario named {entry.use!r}{did_you_mean(entry.use, self.scenarios)}",
                        )
                    )
                elif loop is not None and component.get(entry.use) == loop:
                    problems.append(
                        Problem(
                            scenario.source, entry.line, f"use: {entry.use!r} leads back to {scenario.name!r}, a loop"
                        )
                    )
        if not problems:
            problems = self._chain_problems()
        return problems

    def _chain_problems(self) -> list[Problem]:
        """A chain of `use` longer than MAX_USE_CHAIN is refused, at the scenario it starts from:
        each `use` is followed as a request is answered, and an endless-looking chain is a
        mistake. The depths are found bottom-up, without recursion, over the scenarios that
        `use` any (the graph has no loop by now)."""
        users = {
            name: self._uses(name)
            for name, scenario in self.scenarios.items()
            if any(entry.use for entry in scenario.entries)
        }
        depth: dict[str, int] = {}
        for root in users:
            walk = [root]
            while walk:
                name = walk[-1]
                waiting = [used for used in users.get(name, ()) if used in users and used not in depth]
                if waiting:
                    walk.extend(waiting)
                    continue
                walk.pop()
                depth[name] = 1 + max((depth.get(used, 0) for used in users.get(name, ())), default=0)
        return [
            Problem(
                self.scenarios[name].source,
                self.scenarios[name].line,
                f"use: a chain of {chain} uses, one scenario using the next, starts here; at most {MAX_USE_CHAIN} may",
            )
            for name, chain in depth.items()
            if chain > MAX_USE_CHAIN
        ]

    def _uses(self, name: str) -> list[str]:
        return cast("list[str]", [entry.use for entry in self.scenarios[name].entries if entry.use in self.scenarios])

    def _loop_components(self, roots: Iterable[str]) -> dict[str, str]:
        """The strongly connected components of the `use` graph reachable from `roots` (Tarjan's,
        without recursion: a chain of `use` may be thousands long): for each scenario on a
        loop, its component's first scenario. A `use` closes a loop when it stays in one."""
        order: dict[str, int] = {}  # the order each scenario was reached in
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        component: dict[str, str] = {}
        for root in roots:
            if root in order:
                continue
            walk = [(root, iter(self._uses(root)))]
            order[root] = low[root] = len(order)
            stack.append(root)
            on_stack.add(root)
            while walk:
                name, uses = walk[-1]
                used = next(uses, None)
                if used is None:
                    walk.pop()
                    if walk:
                        low[walk[-1][0]] = min(low[walk[-1][0]], low[name])
                    if low[name] == order[name]:
                        self._pop_component(name, stack, on_stack, component)
                elif used not in order:
                    order[used] = low[used] = len(order)
                    stack.append(used)
                    on_stack.add(used)
                    walk.append((used, iter(self._uses(used))))
                elif used in on_stack:
                    low[name] = min(low[name], order[used])
        return component

    def _pop_component(self, top: str, stack: list[str], on_stack: set[str], component: dict[str, str]) -> None:
        """Take the component whose first scenario is `top` off the stack; kept, by `top`, when it is a loop."""
        members: list[str] = []
        while not members or members[-1] != top:
            members.append(stack.pop())
        on_stack.difference_update(members)
        if len(members) > 1 or top in self._uses(top):
            component.update(dict.fromkeys(members, top))

    def first_match(self, protocol: str, request, headers) -> Scenario | None:
        """The first scenario, by name, whose `match` fits `request` (a ParsedRequest to the
        `protocol` route, sent with `headers`)."""
        for scenario in self._matching:
            if scenario.match.fits(protocol, request, headers):  # type: ignore[union-attr]  # _matching: all have one
                return scenario
        return None

    @cached_property
    def _matching(self) -> tuple[Scenario, ...]:
        """The scenarios with a `match`, in the order they are tried: by name."""
        return tuple(self.scenarios[name] for name in sorted(self.scenarios) if self.scenarios[name].match is not None)

    def plays_alike(self, name: str | Pinned) -> tuple[str, Script] | None:
        """The label and script of every request for `name`, or None when they differ from
        request to request (a sequence, a conversation, a quoting step, a queued entry)."""
        known = self.alike.get(name)
        if known is None and type(name) is str:
            scenario = self.scenarios[name]
            if not (
                scenario.is_sequence
                or scenario.is_conversation
                or cast(Script, scenario.entries[0].script).request_text
            ):
                known = self.alike[name] = resolve(self, name, 1)
        return known

    def queued(self, name: str) -> list[str | Pinned]:
        """What the queue holds to play `name` once: a sequence's whole run, entry by entry."""
        scenario = self.scenarios[name]
        if scenario.is_sequence:
            return [Pinned(name, number) for number in range(1, len(scenario.entries) + 1)]
        return [name]


class SequenceCounters:
    """How many requests each sequence has answered, to pick its entry."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def clear(self) -> None:
        self._counts.clear()

    def forget(self, name: str) -> None:
        """Start `name` again from its first entry (after it was replaced)."""
        self._counts.pop(name, None)

    def next_script(self, library: Library, choice: str | Pinned, request=None) -> tuple[str, Script]:
        """The script the next request for `choice` (a name, or a queued entry) plays, and the
        label the journal records; `request` is the ParsedRequest, for conversations and quotes."""
        alike = library.plays_alike(choice)
        if alike is not None:  # nothing to count
            return alike
        if type(choice) is Pinned:
            return resolve(library, choice.name, choice.number, request, self)
        count = 1
        if library[choice].is_sequence:
            count = self._counts[choice] = self._counts.get(choice, 0) + 1
        return resolve(library, choice, count, request, self)


def resolve(
    library: Library, name: str, request_number: int, request=None, counters: SequenceCounters | None = None
) -> tuple[str, Script]:
    """The script request number `request_number` of scenario `name` plays (for a conversation,
    the entry of the request's turn), following `use`, its quotes filled from `request`."""
    scenario = library.scenarios[name]
    if scenario.is_conversation and request is not None:
        request_number = request.conversation.turn
    entry = scenario.entry_for(request_number)
    label = (
        f"{name}[{min(request_number, len(scenario.entries))}]"
        if scenario.is_sequence or scenario.is_conversation
        else name
    )
    if entry.use is not None:
        used_label, script = used(library, scenario, entry.use, request, counters)
        return f"{label}->{used_label}", script
    script = cast(Script, entry.script)  # an entry is a use or a script
    return label, quoting.filled(script, request) if script.request_text else script


def used(
    library: Library, scenario: Scenario, name: str, request, counters: SequenceCounters | None
) -> tuple[str, Script]:
    """What an entry's `use: name` plays: that scenario's first answer (a conversation's, the
    request's turn); inside a conversation, a sequence's next entry, by its own counter."""
    if scenario.is_conversation and library[name].is_sequence and counters is not None:
        return counters.next_script(library, name, request)
    return resolve(library, name, 1, request, counters)
