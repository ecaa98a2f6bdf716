"""Private/shared, written from the public description of the game: does the model keep track of
what it has told its partner?

The answerer (the LLM seat) holds five slots of private information for a scenario (a trip, a
restaurant order, a job offer). A programmatic questioner asks for one slot at a time. Before the
first question and after every answer the game master *probes* the answerer, aside, for every
slot: "does the other person already know it?" (6 rounds x 5 probes). A slot becomes shared once
it was asked and answered, or once its value was said in any answer. Unlike clembench, where probes are not
remembered by the answerer, probes and their answers stay in the answerer's chat: every trainer
adapter trains on one growing conversation per seat, and a chat that forgets turns cannot be one.

Scores: slot accuracy (the answer contains the private value) and Cohen's kappa between the
probe answers and the truth, truncated at 0; Main Score = 100 x harmonic mean of the two.
Success = every slot right and every probe right.

Parse rules (clembench 2.0's): an answer is one line starting with ``ANSWER:`` (else the episode
aborts); a probe answer is one line starting with ``ASIDE:`` and then yes or no. A probe answered
otherwise is asked again, up to 5 tries in all; the fifth bad one aborts.
"""

from __future__ import annotations

import random
from typing import ClassVar

from clembench_games.master import GameMaster, Message

#: Scenario -> slot -> (question, possible values). Written for this project.
SCENARIOS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "travel_booking": {
        "destination": ("Where would you like to travel?", ("Lisbon", "Oslo", "Vienna", "Dublin", "Athens", "Krakow")),
        "day": ("On which day do you want to leave?", ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")),
        "class": ("Which travel class do you prefer?", ("economy", "business", "first")),
        "seat": ("Which seat would you like?", ("window", "aisle", "middle")),
        "meal": ("Which meal should we order for you?", ("vegetarian", "vegan", "fish", "chicken")),
    },
    "restaurant_order": {
        "starter": ("What would you like as a starter?", ("soup", "salad", "bruschetta", "olives")),
        "main": ("Which main course would you like?", ("risotto", "curry", "burger", "lasagna", "pancakes")),
        "drink": ("What would you like to drink?", ("water", "lemonade", "coffee", "tea", "juice")),
        "dessert": ("Which dessert would you like?", ("sorbet", "brownie", "cheesecake", "fruit")),
        "table": ("Where would you like to sit?", ("terrace", "window", "bar", "garden")),
    },
    "job_offer": {
        "role": ("Which position are you applying for?", ("designer", "accountant", "nurse", "engineer", "teacher")),
        "start": ("In which month could you start?", ("March", "April", "June", "September", "November")),
        "hours": ("Do you want full-time or part-time work?", ("full-time", "part-time")),
        "office": ("Where would you prefer to work?", ("remote", "office", "hybrid")),
        "salary": ("Which yearly salary do you expect?", ("40000", "52000", "61000", "75000")),
    },
}
SLOTS_PER_INSTANCE = 5
PROBE_TRIES = 5


def make_slots(scenario: str, rng: random.Random) -> list[dict[str, str]]:
    names = rng.sample(sorted(SCENARIOS[scenario]), SLOTS_PER_INSTANCE)
    return [{"slot": n, "value": rng.choice(SCENARIOS[scenario][n][1])} for n in names]


def cohen_kappa(truth: list[bool], answers: list[bool]) -> float:
    """Agreement beyond chance; 1 for perfect agreement even when only one class occurs."""
    n = len(truth)
    observed = sum(t == a for t, a in zip(truth, answers, strict=True)) / n
    p_truth, p_ans = sum(truth) / n, sum(answers) / n
    expected = p_truth * p_ans + (1 - p_truth) * (1 - p_ans)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1 - expected)


class PrivateShared(GameMaster):
    name: ClassVar[str] = "privateshared"
    seats: ClassVar[tuple[str, ...]] = ("answerer",)
    max_requests: ClassVar[int] = (SLOTS_PER_INSTANCE + 1) * SLOTS_PER_INSTANCE * PROBE_TRIES + SLOTS_PER_INSTANCE
    rules: ClassVar[dict[str, str]] = {
        "answerer": (
            "You are talking to an assistant who helps you with this: {scenario_text}. Your private "
            "information, which the assistant does not know until you tell it:\n{private}\n"
            "The assistant asks you one question at a time; answer only what is asked, in one line "
            "starting with ANSWER:, for example:\nANSWER: Monday\n"
            "Now and then I ask you aside, without the assistant hearing it, whether the assistant "
            "already knows something. Answer me in one line starting with ASIDE:, for example:\n"
            "ASIDE: no"
        )
    }

    def __init__(self, instance: dict):
        private = "\n".join(f"- {s['slot']}: {s['value']}" for s in instance["slots"])
        super().__init__({"scenario_text": instance["scenario"].replace("_", " "), "private": private, **instance})
        self.slots: list[dict[str, str]] = instance["slots"]
        self.asked = 0  # slots asked and answered so far
        self.known: set[int] = set()  # slots the questioner knows: asked, or said in any answer
        self.correct: list[bool] = []
        self.probe_queue: list[int] = list(range(len(self.slots)))  # a probe round before the first question
        self.probe_tries = 0
        self.probe_truth: list[bool] = []
        self.probe_answers: list[bool] = []

    def _question(self, i: int) -> str:
        return "QUESTION: " + SCENARIOS[self.instance["scenario"]][self.slots[i]["slot"]][0]

    def _probe(self, i: int) -> None:
        again = f" (try {self.probe_tries + 1} of {PROBE_TRIES})" if self.probe_tries else ""
        self.ask(
            "answerer",
            f"(Aside, the assistant does not hear this.){again} Does the assistant already know your "
            f"{self.slots[i]['slot']}? Answer with ASIDE: yes or ASIDE: no",
        )

    def opening(self) -> None:
        self._probe(0)

    def on_reply(self, seat: str, text: str) -> None:
        one_line = "\n" not in text.strip("\n")
        if self.probe_queue:  # answering a probe
            said = text.removeprefix("ASIDE:").strip().lower() if text.startswith("ASIDE:") and one_line else ""
            verdict = "yes" if said.startswith("yes") else "no" if said.startswith("no") else None
            if verdict is None:
                self.probe_tries += 1
                if self.probe_tries >= PROBE_TRIES:
                    self.abort(f"probe answered {PROBE_TRIES} times without one line 'ASIDE: yes|no'")
                else:
                    self.log.append(f"probe asked again: {text[:60]!r} is not one line 'ASIDE: yes|no'")
                    self._probe(self.probe_queue[0])
                return
            slot = self.probe_queue.pop(0)
            self.probe_tries = 0
            self.probe_truth.append(slot in self.known)
            self.probe_answers.append(verdict == "yes")
        else:  # answering the questioner
            if not text.startswith("ANSWER:") or not one_line:
                self.abort("reply is not one line starting with 'ANSWER:'")
                return
            answer = text.removeprefix("ANSWER:").strip().lower()
            self.correct.append(self.slots[self.asked]["value"].lower() in answer)
            self.known |= {self.asked} | {i for i, s in enumerate(self.slots) if s["value"].lower() in answer}
            self.asked += 1
            self.probe_queue = list(range(len(self.slots)))
        if self.probe_queue:
            self._probe(self.probe_queue[0])
        elif self.asked < len(self.slots):
            self.ask("answerer", self._question(self.asked))
        elif self.main_score() == 100.0:
            self.win("every slot and probe right")
        else:
            self.lose(f"slot accuracy {self.slot_accuracy():.2f}, kappa {self.kappa():.2f}")

    def slot_accuracy(self) -> float:
        return sum(self.correct) / len(self.slots)

    def kappa(self) -> float:
        return max(0.0, cohen_kappa(self.probe_truth, self.probe_answers))

    def main_score(self) -> float:
        acc, kappa = self.slot_accuracy(), self.kappa()
        return 0.0 if acc + kappa == 0 else 100.0 * 2 * acc * kappa / (acc + kappa)

    # --- scripted players ---------------------------------------------------------------------
    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if self.probe_queue:
            return f"ASIDE: {'yes' if self.probe_queue[0] in self.known else 'no'}"
        return f"ANSWER: {self.slots[self.asked]['value']}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if self.probe_queue:
            return f"ASIDE: {rng.choice(['yes', 'no'])}"
        return f"ANSWER: {rng.choice(SCENARIOS[self.instance['scenario']][self.slots[self.asked]['slot']][1])}"
