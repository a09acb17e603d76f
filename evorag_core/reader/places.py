"""Countries, their nationality words and the US states: what the yes/no decider (`reader/yes_no.py`) reads a
nationality or a country from, and what a "which country" question's answer must be (`reader/answer_type.py`).

`country_mentions(text)` -> the countries a text names, in order of first mention, each as its canonical key
("American", "the United States", "U.S.", "Nevada" -> "united states"; "Scottish", "England", "UK" -> "united
kingdom": the nations of the UK are one nationality here). `language_mentions(text)` -> the languages a text names
("French libretto" -> "french"); `state_mentions(text)` the US states it names. `is_country(span)`: the span is a country's name (not a nationality word); `is_nationality(span)` the
reverse. Names
are matched as written, capitalised ("US" the country, not "us"). Pure functions of strings; the tables are literal.
"""
from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["country_mentions", "country_words", "state_mentions", "is_nationality", "language_mentions", "is_country", "COUNTRIES", "US_STATES", "LANGUAGES"]

# canonical key | the country's names | its nationality words
COUNTRIES: tuple[str, ...] = tuple(row.strip() for row in """
united states|United States, United States of America, USA, U.S.A., U.S., US, America|American, Americans
united kingdom|United Kingdom, UK, U.K., Britain, Great Britain, England, Scotland, Wales, Northern Ireland|British, English, Scottish, Welsh, Briton
ireland|Ireland, Republic of Ireland|Irish
canada|Canada|Canadian
australia|Australia|Australian
new zealand|New Zealand|New Zealander
france|France|French
germany|Germany, West Germany, East Germany|German
italy|Italy|Italian
spain|Spain|Spanish
portugal|Portugal|Portuguese
netherlands|Netherlands, Holland|Dutch
belgium|Belgium|Belgian
switzerland|Switzerland|Swiss
austria|Austria|Austrian
sweden|Sweden|Swedish
norway|Norway|Norwegian
denmark|Denmark|Danish
finland|Finland|Finnish
iceland|Iceland|Icelandic
estonia|Estonia|Estonian
latvia|Latvia|Latvian
lithuania|Lithuania|Lithuanian
poland|Poland|Polish
czech republic|Czech Republic, Czechia, Czechoslovakia|Czech, Czechoslovak
slovakia|Slovakia|Slovak
slovenia|Slovenia|Slovenian, Slovene
hungary|Hungary|Hungarian
romania|Romania|Romanian
albania|Albania|Albanian
greece|Greece|Greek
turkey|Turkey, Ottoman Empire|Turkish, Ottoman
russia|Russia, Soviet Union, USSR|Russian, Soviet
ukraine|Ukraine|Ukrainian
belarus|Belarus|Belarusian
armenia|Armenia|Armenian
serbia|Serbia, Yugoslavia|Serbian, Yugoslav
croatia|Croatia|Croatian
bosnia|Bosnia and Herzegovina, Bosnia|Bosnian
bulgaria|Bulgaria|Bulgarian
israel|Israel|Israeli
lebanon|Lebanon|Lebanese
saudi arabia|Saudi Arabia|Saudi
iran|Iran|Iranian, Persian
iraq|Iraq|Iraqi
afghanistan|Afghanistan|Afghan
egypt|Egypt|Egyptian
morocco|Morocco|Moroccan
india|India|Indian
pakistan|Pakistan|Pakistani
bangladesh|Bangladesh|Bangladeshi
sri lanka|Sri Lanka|Sri Lankan
nepal|Nepal|Nepalese, Nepali
china|China, People's Republic of China|Chinese
taiwan|Taiwan|Taiwanese
japan|Japan|Japanese
south korea|South Korea, Korea|South Korean, Korean
north korea|North Korea|North Korean
vietnam|Vietnam|Vietnamese
thailand|Thailand|Thai
philippines|Philippines|Filipino, Philippine
indonesia|Indonesia|Indonesian
malaysia|Malaysia|Malaysian
singapore|Singapore|Singaporean
mexico|Mexico|Mexican
jamaica|Jamaica|Jamaican
cuba|Cuba|Cuban
brazil|Brazil|Brazilian
argentina|Argentina|Argentine, Argentinian
chile|Chile|Chilean
colombia|Colombia|Colombian
venezuela|Venezuela|Venezuelan
peru|Peru|Peruvian
south africa|South Africa|South African
nigeria|Nigeria|Nigerian
ghana|Ghana|Ghanaian
kenya|Kenya|Kenyan
""".strip().splitlines())

US_STATES: tuple[str, ...] = tuple(s.strip() for s in """Alabama, Alaska, Arizona, Arkansas, California, Colorado,
Connecticut, Delaware, Florida, Georgia, Hawaii, Idaho, Illinois, Indiana, Iowa, Kansas, Kentucky, Louisiana, Maine,
Maryland, Massachusetts, Michigan, Minnesota, Mississippi, Missouri, Montana, Nebraska, Nevada, New Hampshire,
New Jersey, New Mexico, New York, North Carolina, North Dakota, Ohio, Oklahoma, Oregon, Pennsylvania, Rhode Island,
South Carolina, South Dakota, Tennessee, Texas, Utah, Vermont, Virginia, Washington, West Virginia, Wisconsin,
Wyoming""".replace("\n", " ").split(","))

LANGUAGES: tuple[str, ...] = tuple("""English French German Italian Spanish Portuguese Dutch Swedish Norwegian Danish
Finnish Icelandic Polish Czech Hungarian Romanian Greek Turkish Russian Ukrainian Serbian Croatian Bulgarian Hebrew
Persian Arabic Hindi Urdu Bengali Tamil Telugu Malayalam Kannada Marathi Punjabi Chinese Mandarin Cantonese Japanese
Korean Vietnamese Thai Indonesian Malay Tagalog Latin Swahili Yiddish Irish Welsh Gaelic""".split())


@lru_cache(maxsize=1)
def _table() -> tuple[re.Pattern[str], dict[str, str], frozenset[str]]:
    """One alternation over every name, longest first ("South Korean" before "Korean"); name -> canonical key; the
    names that are countries (US states included), not nationality words."""
    canon: dict[str, str] = {}
    countries: set[str] = set()
    for row in COUNTRIES:
        key, names, nationalities = row.split("|")
        for name in (n.strip() for n in names.split(",")):
            canon[name] = key
            countries.add(name.lower())
        canon.update({n.strip(): key for n in nationalities.split(",") if n.strip()})
    for state in US_STATES:
        canon[state] = "united states"
        countries.add(state.lower())
    alts = "|".join(r"\s+".join(re.escape(w) for w in n.split()) for n in sorted(canon, key=len, reverse=True))
    return re.compile(rf"(?<![\w.])(?:{alts})(?![\w])"), {" ".join(n.split()): k for n, k in canon.items()}, \
        frozenset(countries)


def country_mentions(text: str, states: bool = True) -> list[str]:
    """Canonical countries named in `text` (country names, nationality words and, with `states`, US states), first
    mention first."""
    pattern, canon, _ = _table()
    found = (canon.get(" ".join(m.group(0).split())) for m in pattern.finditer(text)
             if states or m.group(0) not in US_STATES)
    return list(dict.fromkeys(k for k in found if k))


def country_words(text: str) -> list[str]:
    """The country names, nationality words and US states written in `text`, as written."""
    return [m.group(0) for m in _table()[0].finditer(text)]


def state_mentions(text: str) -> list[str]:
    """US states named in `text`, as the table spells them, first mention first."""
    return list(dict.fromkeys(re.findall(rf"(?<![\w.])({'|'.join(US_STATES)})(?![\w])", text)))


def language_mentions(text: str) -> list[str]:
    """Languages named in `text`, lower-cased, first mention first."""
    return list(dict.fromkeys(w.lower() for w in re.findall(rf"\b({'|'.join(LANGUAGES)})\b", text)))


def is_country(span: str) -> bool:
    """`span` is a country's name or short form ("France", "the United States", "Holland"); not a US state."""
    _, canon, countries = _table()
    name = " ".join(re.sub(r"^the\s+", "", span.strip(), flags=re.I).split())
    return name.lower() in countries and canon.get(name) is not None and name not in US_STATES


def is_nationality(span: str) -> bool:
    """`span` is a nationality word ("Swedish", "South Korean"), not a country's name."""
    _, canon, countries = _table()
    name = " ".join(span.split())
    return name in canon and name.lower() not in countries
