"""Build the bundled demo data set `data/demo/demo.jsonl` from the fictional world written below.

The world is the invented republic of Ostrevia: towns on rivers, the people born there, the companies,
ships, bands and films they made. Every passage is one encyclopedic paragraph keyed by its title; every
question names its gold passages (one per hop, in hop order, the answer in the last one) and a few
hand-picked near-miss distractors. Bridge and 3hop chains may not be short-circuited: the passage holding
the answer names none of the entities named in the question (checked here).

The rest of each question's passages are drawn deterministically:

1. candidates are scored by how related they are to the question's gold and near-miss passages
   (similar title, a link in either direction, a shared mentioned entity, an entity named in the question);
2. the best-scored are taken first, ties broken by how often a passage was already used, then by a seeded
   random draw, until the question has 8-10 passages;
3. a coverage pass adds every passage not yet used to the question it is most related to (first to its
   gold and near-miss passages, then to the passages it already has; up to 12 passages per question),
   so the pooled corpus holds the whole world.

Unanswerable questions have no gold passage; their `answers` hold a plausible but false-to-the-corpus
answer that occurs in no passage of the whole world (checked here), and `hops` is null.
Run `python data/demo/build_demo.py` to rewrite demo.jsonl (`--check` only compares).
"""
from __future__ import annotations

import argparse
import difflib
import json
import random
import re
import string
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["WORLD", "QUESTIONS", "DemoQuestion", "build_records", "render_jsonl", "main"]

OUT_PATH = Path(__file__).resolve().parent / "demo.jsonl"
SEED = 20240613
MIN_PASSAGES, START_MAX, MAX_PASSAGES = 8, 10, 12

# --- the world: category -> {title: text} ---------------------------------------------------------

PLACES: dict[str, str] = {
    "Ostrevia": "Ostrevia is a small coastal republic on the Bay of Ilvane. It is divided into four provinces: Velmark, Solenne, the Dray Uplands and Lissowan. The capital is Harwick and the currency is the ostrel.",
    "Carrandine": "Carrandine is a kingdom on the far shore of the Bay of Ilvane from Ostrevia. The two countries fought a series of naval wars between 1794 and 1815.",
    "Velloran": "Velloran is the capital and chief port of Carrandine. A regular steamer service has linked it with Port Ilvane since 1872.",
    "Velmark Province": "Velmark Province is the northern province of Ostrevia, crossed by the Orlen and Sable rivers. Its seat is Harwick, which is also the national capital.",
    "Solenne Province": "Solenne Province occupies the southern coast of Ostrevia along the Bay of Ilvane. Its seat is Port Ilvane, and its economy rests on shipbuilding, fishing and salt.",
    "Dray Uplands": "The Dray Uplands are the mountainous eastern province of Ostrevia. The provincial seat is Coldharrow. Copper and silver have been mined there since the fourteenth century.",
    "Lissowan Province": "Lissowan Province lies in the west of Ostrevia, in the basin of the Venn River. Its seat is Tamberlin, and its farms grow most of the country's grain.",
    "Bay of Ilvane": "The Bay of Ilvane is a wide inlet of the sea on the southern coast of Ostrevia. The Orlen, Venn and Caddock rivers all drain into it.",
    "Orlen River": "The Orlen River is the longest river in Ostrevia, flowing 412 kilometres from the western slope of Mount Keshet to the Bay of Ilvane. It passes Coldharrow, Brisk Ferry and Harwick before reaching the sea at Port Ilvane.",
    "Orla River": "The Orla River is a 38-kilometre tributary that joins the Orlen at Brisk Ferry. It drains the marshes of the Orla Fen and is often confused with the much longer Orlen.",
    "Orla Fen": "The Orla Fen is a marsh of about 60 square kilometres north of Brisk Ferry. It has been a nature reserve since 1937 and is a breeding ground of the grey heron.",
    "Venn River": "The Venn River flows for 268 kilometres through Lissowan Province. It passes Tamberlin and Aldcross before spreading into a wide delta on the Bay of Ilvane.",
    "Sable River": "The Sable River is 155 kilometres long and runs through Velmark Province before joining the Orlen. The mill towns of Mirrow and Ostby stand on its banks.",
    "Caddock River": "The Caddock River is 97 kilometres long and flows through Solenne Province. It enters the Bay of Ilvane at Saltmere.",
    "Quill River": "The Quill River is a fast mountain stream in the Dray Uplands, 61 kilometres long. The towns of Fenwold and Kessling lie on its banks, and it joins the Orlen below Coldharrow.",
    "Lake Ambry": "Lake Ambry is a glacial lake of 44 square kilometres in Lissowan Province, drained by a short channel into the Venn River. The spa town of Veldra stands on its northern shore.",
    "Mount Keshet": "Mount Keshet, at 2,874 metres, is the highest mountain in Ostrevia and stands in the Dray Uplands. The Orlen River rises on its western slope. It was first climbed in 1867 by Tomas Reeve and Hanne Lisk.",
    "Mount Keshel": "Mount Keshel is a 1,906-metre peak in the Dray Uplands, about 30 kilometres south of Mount Keshet. It was first climbed in 1851 by the surveyor Brandt Olway.",
    "Dunmore Pass": "Dunmore Pass is a mountain pass at 1,820 metres linking Coldharrow with Kessling. A road over the pass was opened in 1912.",
    "Orlen Gorge": "The Orlen Gorge is a 14-kilometre canyon cut by the Orlen River below Coldharrow. A railway was built through it in 1896.",
    "Harwick": "Harwick is the capital of Ostrevia and the seat of Velmark Province. It lies on the Orlen River and was founded in 1214 as a toll station. It has about 184,000 inhabitants.",
    "Harwell": "Harwell is a fishing village on the Solenne coast east of Saltmere, with about 900 inhabitants. Its lighthouse on Harwell Point was built in 1862.",
    "Port Ilvane": "Port Ilvane is the seat of Solenne Province and the largest city in Ostrevia, with about 231,000 inhabitants. It stands at the mouth of the Orlen River and was founded in 1088.",
    "Coldharrow": "Coldharrow is a mountain town on the upper Orlen River, at an elevation of 1,140 metres. It was founded in 1302 around a silver mine.",
    "Coldhaven": "Coldhaven is a small harbour town on the Solenne coast, founded in 1496. Its sheltered bay made it the home port of Ostrevia's herring fleet.",
    "Brisk Ferry": "Brisk Ferry is a town in Velmark Province at the confluence of the Orla and Orlen rivers. It grew around a ferry crossing first recorded in 1455, which was replaced by the Brisk Ferry Bridge in 1889.",
    "Tamberlin": "Tamberlin is the seat of Lissowan Province and stands on the Venn River. It was founded in 1190, which makes it one of the oldest towns in Ostrevia.",
    "Greyford": "Greyford is a village on the Venn River a few kilometres above Tamberlin. It is the birthplace of the poet Ilka Rhone.",
    "Aldcross": "Aldcross is a market town on the Venn River in Lissowan Province, founded in 1367. It has been known for its glassworks since the sixteenth century.",
    "Greywater": "Greywater is a port town in Lissowan Province, in the delta of the Venn River. It was founded in 1521, and its harbour handles most of the province's grain exports.",
    "Mirrow": "Mirrow is a mill town on the Sable River in Velmark Province, founded in 1402. Its paper mills supplied most of Ostrevia's printers in the nineteenth century.",
    "Ostby": "Ostby is a town on the lower Sable River in Velmark Province, founded in 1610. Every October it hosts the Ostby Lantern Fair.",
    "Ostby Moor": "Ostby Moor is an expanse of heather moorland east of Ostby. The old drovers' road from Ostby to Harwick crosses it.",
    "Lantry": "Lantry is a town on the Caddock River in Solenne Province, founded in 1533. It is known for its apple orchards and its cider.",
    "Saltmere": "Saltmere is a town at the mouth of the Caddock River in Solenne Province. It was founded in 1277, and its salt pans are among the oldest in Ostrevia.",
    "Fenwold": "Fenwold is a town on the Quill River in the Dray Uplands, founded in 1388. It is the starting point of the usual climbing route up Mount Keshet.",
    "Kessling": "Kessling is a mining town on the Quill River in the Dray Uplands. It was founded in 1742, after copper was found in the valley.",
    "Veldra": "Veldra is a spa town on the northern shore of Lake Ambry in Lissowan Province. It was founded in 1604 and hosts the Veldra Film Festival every June.",
    "Velda": "Velda is a hamlet in Velmark Province with fewer than 200 inhabitants. It is best known for the Velda Stones.",
    "Tamber Island": "Tamber Island is a low, sandy island in the Venn delta, reached from Greywater by ferry. Its lighthouse was built in 1871.",
    "Venn Delta Nature Park": "The Venn Delta Nature Park protects reed beds and lagoons south of Greywater. It was established in 1976 and is the largest wetland reserve in Ostrevia.",
    "Gannet Rock": "Gannet Rock is a bare islet off the Solenne coast, home to a colony of about 6,000 gannets. Several Ostrevian ships have been named after it.",
    "Keshet Glacier": "The Keshet Glacier lies on the northern face of Mount Keshet. It has shrunk by about a third since measurements began in 1896.",
}

PEOPLE: dict[str, str] = {
    "Ansel Travine": "Ansel Travine (1821–1893) was an Ostrevian chemist born in Mirrow. In 1849 he invented the Travine lamp, and in 1851 he became the first rector of Harwick Polytechnic.",
    "Ansel Trevine": "Ansel Trevine (1902–1977) was an Ostrevian painter born in Lantry. His best-known canvas, The Orchard at Lantry, hangs in the National Gallery of Ostrevia.",
    "Lise Travine": "Lise Travine (1856–1930) was the daughter of the chemist Ansel Travine. She managed the family lamp company from 1893 to 1919.",
    "Tobias Hale": "Tobias Hale (1825–1899) was a merchant born in Port Ilvane. With the chemist Ansel Travine he set up the company that manufactured the Travine lamp.",
    "Lidia Farrow": "Lidia Farrow (1889–1962) was an Ostrevian astronomer born in Fenwold. She discovered the comet that bears her name in 1924 and catalogued more than 3,000 variable stars.",
    "Lidia Farrell": "Lidia Farrell (1893–1970) was an Ostrevian botanist born in Greywater. She spent thirty years surveying the plants of the Venn delta.",
    "Emeric Soll": "Emeric Soll (1867–1940) was an Ostrevian physicist born in Coldharrow. After studying at the Coldharrow School of Mines he described the Soll effect in 1898, and in 1911 he won the Ambry Medal.",
    "Corin Vask": "Corin Vask (1910–1988) was an Ostrevian structural engineer born in Ostby. He designed the Ilvane Harbour Bridge and the Venn Barrage.",
    "Corina Vass": "Corina Vass (born 1948) is a retired Ostrevian sprinter from Harwick. She set the national 200-metre record in 1972.",
    "Mara Quellen": "Mara Quellen (1934–2011) was an Ostrevian marine biologist born in Saltmere. She served as chief scientist aboard the Meridian Lark from 1971 to 1984 and was known for her studies of herring migration.",
    "Mara Quell": "Mara Quell (born 1970) is an Ostrevian swimmer from Port Ilvane. She won the national 400-metre freestyle title eight times.",
    "Hendrik Aulo": "Hendrik Aulo (1795–1861) was an Ostrevian cartographer born in Tamberlin. His Survey Map of Ostrevia was the first to show the whole course of the Orlen River.",
    "Petra Aulo": "Petra Aulo (1801–1880) was a glassmaker and the younger sister of Hendrik Aulo. She ran the Aldcross Glassworks from 1838 until her death.",
    "Brandt Olway": "Brandt Olway (1818–1890) was a surveyor of the Dray Uplands. He mapped the Quill valley for the Kessling Copper Company.",
    "Jan Olway": "Jan Olway (born 1951) is an Ostrevian politician. He was mayor of Port Ilvane from 1994 to 2006.",
    "Tomas Reeve": "Tomas Reeve (1839–1902) was an Ostrevian mountaineer and schoolteacher from Fenwold. He later wrote a popular guidebook to the peaks of the Dray Uplands.",
    "Hanne Lisk": "Hanne Lisk (1844–1921) was a botanist and climber from Coldharrow. She collected more than 400 alpine plant specimens for Tamberlin University.",
    "Wendel Ask": "Wendel Ask (1838–1907) was an Ostrevian civil engineer. He designed railway bridges throughout Velmark Province and taught at Harwick Polytechnic from 1872.",
    "Edda Brannock": "Edda Brannock (1848–1921) was an Ostrevian industrialist born in Brisk Ferry. She founded an ironworks in Harwick and was the first woman to sit in the Ostrevian Chamber of Commerce.",
    "Edvard Brannock": "Edvard Brannock (1875–1940) was the son of the industrialist Edda Brannock. A painter of factory scenes, he refused to join the family business.",
    "Gustav Renn": "Gustav Renn (1871–1945) was an Ostrevian engineer born in Tamberlin. In 1903 he founded the Renn Motor Company.",
    "Gustav Rennick": "Gustav Rennick (1880–1952) was an Ostrevian businessman born in Coldhaven. In 1911 he opened a fish cannery in Saltmere.",
    "Osric Fell": "Osric Fell (1840–1914) was an Ostrevian shipbuilder and naval architect born in Port Ilvane. He trained in Carrandine before starting his own yard.",
    "Osric Fenn": "Osric Fenn (1911–1976) was an Ostrevian architect. He designed the harbour-front library of the Port Ilvane Naval Academy, completed in 1952.",
    "Isolde Vantry": "Isolde Vantry (born 1938) is an Ostrevian electronics engineer and entrepreneur. She studied physics at Harwick Polytechnic and founded her own radio company in 1964.",
    "Marten Oakes": "Marten Oakes (1890–1959) was an Ostrevian publisher and bookseller. His three daughters joined his firm in the 1930s.",
    "Jory Pask": "Jory Pask (1768–1839) was an Ostrevian naval officer born in Saltmere. He became an admiral in 1820 and wrote a book of flag signals used by the fleet for fifty years.",
    "Ruth Callan": "Ruth Callan (1861–1916) was an Ostrevian sea captain born in Coldhaven. In 1894 she became one of the first women licensed as a master mariner in Ostrevia.",
    "Ruth Calder": "Ruth Calder (1899–1984) was an Ostrevian aviator born in Coldharrow. In 1929 she flew nonstop from Harwick to Velloran.",
    "Nils Adair": "Nils Adair (1946–2015) was an Ostrevian folk singer born in Ostby. He was the lead vocalist of The Orla Fen Ramblers from 1968 to 1983 and later recorded three solo albums.",
    "Greta Marsh": "Greta Marsh (born 1949) is an Ostrevian fiddler from Veldra. She joined The Orla Fen Ramblers in 1971 and has taught folk fiddle at the Harwick Conservatory since 1990.",
    "Anton Weir": "Anton Weir (1941–2019) was an Ostrevian record producer born in Harwick. He produced more than sixty albums, among them Delta Lights.",
    "Tova Rusk": "Tova Rusk (born 1958) is an Ostrevian singer and songwriter born in Greywater. Before turning to music she worked as a deckhand on grain ships.",
    "Tove Raske": "Tove Raske (1912–1990) was an Ostrevian soprano born in Mirrow. She sang at the Harwick Opera House for thirty years.",
    "Pim Koster": "Pim Koster (born 1963) is an Ostrevian keyboardist and producer from Aldcross. He is one half of the duo Glass Arbour.",
    "Ada Koster": "Ada Koster (born 1965) is an Ostrevian singer from Aldcross. She sings in the duo Glass Arbour and has also written two novels.",
    "Selma Ardent": "Selma Ardent (1812–1879) was an Ostrevian composer and pianist born in Tamberlin. From 1850 to 1872 she was director of the Harwick Conservatory.",
    "Pell Ostrander": "Pell Ostrander (1866–1931) was an Ostrevian composer and the organist of Mirrow Cathedral for forty years.",
    "Rosalind Ebbe": "Rosalind Ebbe (1921–2004) was an Ostrevian film director born in Saltmere. She began with documentaries about the Solenne fisheries, and her last feature was Keshet (1981).",
    "Ivo Brask": "Ivo Brask (1930–2008) was an Ostrevian film director and screenwriter born in Kessling. He made fourteen feature films, most of them comedies.",
    "Ivo Brisk": "Ivo Brisk (born 1961) is a former Ostrevian footballer. He kept goal for Harwick Rovers from 1980 to 1996.",
    "Conrad Vale": "Conrad Vale (1925–1999) was an Ostrevian actor born in Lantry. He appeared in more than forty films and later ran a theatre company in Port Ilvane.",
    "Milo Ferrant": "Milo Ferrant (born 1955) is an Ostrevian director and cinematographer born in Coldharrow. He won the Golden Heron in 1991 for Harbour of Glass.",
    "Aurel Demsk": "Aurel Demsk (1902–1985) was an Ostrevian film critic. He edited the arts pages of the Harwick Gazette from 1931 to 1967.",
    "Ilka Rhone": "Ilka Rhone (1884–1950) was an Ostrevian poet born in Greyford. Her collection Salt and Ash won the Ostrevian Prize for Poetry.",
    "Ada Marrick": "Ada Marrick (1919–2001) was an Ostrevian novelist born in Port Ilvane. She is best known for historical novels about nineteenth-century inventors.",
    "Aurelia Dunmore": "Aurelia Dunmore (1869–1944) was the first president of Ostrevia, serving from 1921 to 1929. She was born in Tamberlin and trained as a lawyer.",
    "Jonas Veitch": "Jonas Veitch (1839–1911) was a clockmaker in Mirrow. He built or rebuilt the clocks of more than thirty Ostrevian churches and town halls.",
    "Oskar Pell": "Oskar Pell (1921–1997) was an Ostrevian trade-union leader born in Kessling. He led the copper miners' strike of 1953.",
}

ORGANISATIONS: dict[str, str] = {
    "Harwick Polytechnic": "Harwick Polytechnic is a technical university in Harwick, founded in 1851. It is the leading school of engineering in Ostrevia, with about 11,000 students.",
    "Coldharrow School of Mines": "The Coldharrow School of Mines was founded in 1788 to train engineers for the silver and copper mines of the Dray Uplands. Since 1972 it has been part of Tamberlin University.",
    "Tamberlin University": "Tamberlin University is the oldest university in Ostrevia, founded in 1411. It has faculties of law, medicine, theology and natural sciences.",
    "Harwick Conservatory": "The Harwick Conservatory is the leading music school of Ostrevia, founded in 1822. It has occupied the former Velmark Palace since 1924.",
    "Port Ilvane Naval Academy": "The Port Ilvane Naval Academy trains officers for the Ostrevian navy. It was founded in 1744 and moved to its present buildings on the harbour front in 1903.",
    "Ostrevian Academy of Sciences": "The Ostrevian Academy of Sciences was founded in Harwick in 1838. It publishes the Annals of the Academy and awards the Ambry Medal.",
    "Ostrevian Marine Institute": "The Ostrevian Marine Institute is a research institute in Saltmere founded in 1962. It studies the fisheries and currents of the Bay of Ilvane.",
    "Ostrevian Chamber of Commerce": "The Ostrevian Chamber of Commerce was founded in Harwick in 1809 to represent merchants and manufacturers. It admitted its first woman member in 1890.",
    "Brannock Ironworks": "Brannock Ironworks was an iron foundry founded in Harwick in 1874 by Edda Brannock. At its peak around 1900 it employed 2,400 workers; it closed in 1962.",
    "Travine & Hale Lampworks": "Travine & Hale Lampworks was founded in Harwick in 1852 to manufacture the Travine lamp. It was renamed Travine Lighting in 1931 and closed in 1978.",
    "Renn Motor Company": "The Renn Motor Company was a car manufacturer founded in Aldcross in 1903. Its best-known model was the Renn Heron, a touring car. The company was taken over by the state in 1947.",
    "Rennick Cannery": "Rennick Cannery was a fish cannery founded in Saltmere in 1911 by Gustav Rennick. It canned herring and sardines and closed in 1968.",
    "Ilvane Shipworks": "Ilvane Shipworks is a shipyard in Port Ilvane, founded in 1882 by Osric Fell. By 1910 it employed 3,000 workers and was the largest shipyard in Ostrevia.",
    "Greywater Dockyard": "Greywater Dockyard was a shipyard in Greywater, founded in 1868. It built river steamers and coastal cargo ships until it closed in 1971.",
    "Hale Shipping Line": "The Hale Shipping Line was a passenger line founded in Port Ilvane in 1870 by the Hale family. It operated the Gannet Queen from 1898 until her loss.",
    "Vantry Radio": "Vantry Radio is an electronics company founded in Tamberlin in 1964 by Isolde Vantry. Its first product was the Vantry V1, a pocket transistor receiver.",
    "Oakes & Daughters": "Oakes & Daughters is a publishing house founded in Mirrow in 1921 by Marten Oakes. It publishes poetry and regional history, and in 1929 it brought out the collected letters of Selma Ardent.",
    "Aldcross Glassworks": "The Aldcross Glassworks was founded in 1542 and is the oldest glassworks in Ostrevia. It is known for its green-tinted window glass.",
    "Kessling Copper Company": "The Kessling Copper Company was founded in 1744 to work the copper deposits of the Quill valley. Its last mine closed in 1981.",
    "Saltmere Salt Works": "The Saltmere Salt Works harvest sea salt from tidal pans on the Caddock estuary. They have belonged to the town since 1502.",
    "Ostrevian State Railways": "Ostrevian State Railways is the national railway company, formed in 1921 by merging three private lines. Its main line follows the Orlen River from Port Ilvane to Coldharrow.",
    "Ostrevian Broadcasting Corporation": "The Ostrevian Broadcasting Corporation began radio broadcasts from Harwick in 1926 and television in 1957.",
    "Harwick Gazette": "The Harwick Gazette is the oldest daily newspaper in Ostrevia, first published in 1781.",
    "Ilvane Courier": "The Ilvane Courier is a daily newspaper published in Port Ilvane since 1847. It is known for its shipping news.",
    "Sable Street Studio": "Sable Street Studio is a recording studio in Mirrow, founded in 1966 by the producer Anton Weir in a former paper mill.",
    "Harwick Rovers": "Harwick Rovers is a football club from Harwick, founded in 1899. It has won the Ostrevian league nineteen times and plays at Orlen Park.",
    "Port Ilvane Athletic": "Port Ilvane Athletic is a football club founded in 1903 by workers of Ilvane Shipworks. Its nickname is the Riveters.",
    "The Orla Fen Ramblers": "The Orla Fen Ramblers are an Ostrevian folk band formed in Brisk Ferry in 1968. Their debut album, Ferry Songs, appeared in 1970.",
    "Glass Harbour": "Glass Harbour is an Ostrevian rock band formed in Harwick in 1979. Its lead singer is Tova Rusk, and its second album, Delta Lights, reached number one in 1982.",
    "Glass Arbour": "Glass Arbour is a synth-pop duo formed in Aldcross in 1985 by the siblings Pim and Ada Koster. Their debut album was recorded in a disused glassworks.",
    "The Copper Lanterns": "The Copper Lanterns are a rock band formed in Kessling in 1994 by four sons of miners. Their album Shaft Eleven was released in 1996.",
    "Harwick Literary Society": "The Harwick Literary Society was founded in 1879 by a group of Harwick booksellers. It meets monthly in the reading room of the Harwick Gazette.",
    "Mirrow Grammar School": "Mirrow Grammar School was founded in 1563 and is one of the oldest schools in Velmark Province. Its pupils included the chemist Ansel Travine.",
    "Saltmere Maritime Museum": "The Saltmere Maritime Museum opened in 2003 on the old quay of Saltmere. Its largest exhibit is a retired research vessel moored alongside.",
    "Ostrevian navy": "The Ostrevian navy was founded in 1744 together with its academy at Port Ilvane. Its greatest successes came in the naval wars against Carrandine.",
}

VESSELS: dict[str, str] = {
    "Gannet Queen": "The Gannet Queen was a passenger steamship built by Ilvane Shipworks and launched in 1898. She sailed between Port Ilvane and Greywater until she sank in a storm in 1916 under captain Ruth Callan.",
    "Gannet Prince": "The Gannet Prince was a coastal passenger steamer launched at Greywater Dockyard in 1903. She served the route to Tamber Island until she was scrapped in 1931.",
    "Meridian Lark": "The Meridian Lark is a research vessel built by Ilvane Shipworks and launched in 1967 for the Ostrevian Marine Institute. She was retired in 2002 and is now a museum ship.",
    "Meridian Star": "The Meridian Star was a cargo ship built by Greywater Dockyard and launched in 1954. She carried grain from Greywater to Carrandine until 1979.",
    "Stormwake": "The Stormwake was a 38-gun frigate of the Ostrevian navy, launched at Port Ilvane in 1798. Her longest-serving captain was Jory Pask, who commanded her from 1806 to 1815.",
    "Stormcrest": "The Stormcrest was a 24-gun corvette of the Ostrevian navy launched at Greywater in 1805. She was wrecked on Tamber Island in 1809.",
    "Vigilant": "The Vigilant was a 74-gun ship of the line and the flagship of the Carrandine navy. After her capture she served the Ostrevian fleet as a training ship until 1840.",
    "Heron of Venn": "The Heron of Venn was a paddle steamer that carried passengers on the Venn River between Tamberlin and Greywater from 1871 to 1926.",
    "Renn Heron": "The Renn Heron was a six-cylinder touring car built by the Renn Motor Company from 1927 to 1939. About 14,000 were made, and a Renn Heron won the Dray Rally in 1931.",
    "Renn Kestrel": "The Renn Kestrel was a small two-seat car built by the Renn Motor Company from 1934 to 1938. Fewer than 2,000 were sold.",
    "Vantry V1": "The Vantry V1 was a pocket transistor radio released in 1965. It sold more than 300,000 units in its first three years.",
    "Travine lamp": "The Travine lamp is a paraffin safety lamp. A wire gauze around its flame kept it from igniting mine gas, and it was used in Ostrevian mines until the 1920s.",
}

WORKS: dict[str, str] = {
    "Ferry Songs": "Ferry Songs is the 1970 debut album of The Orla Fen Ramblers. It was recorded in eleven days at Sable Street Studio and includes the band's best-known song, Lanterns on the Orla.",
    "Lanterns on the Orla": "Lanterns on the Orla is a folk song written by Nils Adair and first recorded in 1970. It describes the candle boats floated down the Orla on midsummer night.",
    "Ostby Morning": "Ostby Morning is the 1985 first solo album of the folk singer Nils Adair. Like his earlier work with his band, it was recorded at Sable Street Studio.",
    "Delta Lights": "Delta Lights is the second album by the rock band Glass Harbour, released in 1982. It was produced by Anton Weir and includes the single Grain Ship.",
    "Kiln (album)": "Kiln is the 1987 debut album of the duo Glass Arbour. Its single Green Window was the most-played song on Ostrevian radio that year.",
    "Shaft Eleven": "Shaft Eleven is the 1996 album of The Copper Lanterns, named after a flooded shaft of the Kessling copper mines.",
    "Orlen Symphony": "The Orlen Symphony is a symphony in four movements by Selma Ardent. It was first performed in Harwick in 1858 and follows the river from its source to the sea.",
    "The Ferrywoman": "The Ferrywoman is an opera in three acts by Selma Ardent, first staged in 1867. It tells the story of a ferry keeper at Brisk Ferry during the Great Frost of 1740.",
    "Sable Suite": "The Sable Suite is an orchestral suite by Pell Ostrander, first performed in Mirrow in 1904.",
    "The Salt Road": "The Salt Road is a 1957 Ostrevian drama film directed by Rosalind Ebbe and shot on location in Coldhaven. It starred Conrad Vale and won the Golden Heron in 1958.",
    "The Salt Road Home": "The Salt Road Home is a 1974 comedy film directed by Ivo Brask about a salt merchant's journey from Saltmere to Harwick. Despite its title it is unrelated to The Salt Road.",
    "Keshet (film)": "Keshet is a 1981 mountaineering film about the first ascent of Mount Keshet in 1867. It was shot in Fenwold and on the mountain itself.",
    "Lanterns over Ostby": "Lanterns over Ostby is a 1963 romantic film directed by Ivo Brask. It is set during the Ostby Lantern Fair and was filmed in Ostby.",
    "Harbour of Glass": "Harbour of Glass is a 1990 Ostrevian thriller directed by Milo Ferrant and set in the Greywater docks. Its soundtrack was written by Tova Rusk.",
    "The Orchard at Lantry": "The Orchard at Lantry is a 1934 oil painting by Ansel Trevine showing apple pickers on the Caddock River. It is one of the most reproduced Ostrevian paintings.",
    "Survey Map of Ostrevia": "The Survey Map of Ostrevia is a set of 48 map sheets published in 1832. It remained the standard map of the country until 1900.",
    "Flora of the Venn Delta": "Flora of the Venn Delta is a 1931 botanical survey by Lidia Farrell. It describes more than 900 plant species of the delta marshes.",
    "A Guide to the Dray Peaks": "A Guide to the Dray Peaks is a climbing guidebook by Tomas Reeve, first published in 1885 and revised eleven times.",
    "Salt and Ash": "Salt and Ash is a 1919 poetry collection by Ilka Rhone, written after her brother was lost at sea. It was reissued by Oakes & Daughters in 1925.",
    "The Lamp-Maker": "The Lamp-Maker is a 1962 novel by Ada Marrick based loosely on the life of Ansel Travine. It follows a young chemist from Mirrow to the mines of the Dray Uplands.",
    "Grain Ship (song)": "Grain Ship is a 1982 single by Glass Harbour. Tova Rusk wrote it about her years as a deckhand, and it stayed in the Ostrevian charts for thirty weeks.",
    "Annals of the Academy": "The Annals of the Academy is the journal of the Ostrevian Academy of Sciences, published four times a year since 1840. The first description of the Soll effect appeared in it.",
}

LANDMARKS_AND_EVENTS: dict[str, str] = {
    "Keshet Observatory": "Keshet Observatory is an astronomical observatory at 2,310 metres on the western ridge of Mount Keshet. It opened in 1931, and its first director was Lidia Farrow.",
    "Harwick Observatory": "Harwick Observatory was built on Castle Hill in Harwick in 1790. It was the main observatory of Ostrevia until the city's lights ended most research there in the 1930s.",
    "Comet Farrow": "Comet Farrow is a periodic comet with an orbital period of about 71 years. It was discovered in 1924 and last passed close to the Sun in 1995.",
    "Soll effect": "The Soll effect is the slight rise in the electrical resistance of copper wire in a strong magnetic field. It was described in 1898.",
    "Ambry Medal": "The Ambry Medal is the highest science award of the Ostrevian Academy of Sciences, given every year since 1880. It is named after Count Ulric Ambry, who endowed the prize.",
    "Ambry Hall": "Ambry Hall is a country house on the shore of Lake Ambry, built in 1716 for the Ambry family. It has been a museum since 1958.",
    "Brisk Ferry Bridge": "The Brisk Ferry Bridge is a wrought-iron road bridge over the Orlen River, opened in 1889. It was designed by Wendel Ask, and its iron came from Brannock Ironworks.",
    "Ilvane Harbour Bridge": "The Ilvane Harbour Bridge is a suspension bridge across the harbour of Port Ilvane. Opened in 1958 with a main span of 1,120 metres, it was designed by Corin Vask.",
    "Venn Barrage": "The Venn Barrage is a flood-control dam on the Venn River just upstream of Aldcross, completed in 1949 after repeated spring floods.",
    "Great Orlen Flood": "The Great Orlen Flood of March 1923 was the worst flood in Ostrevian history. The river rose nine metres at Brisk Ferry, and much of lower Harwick was under water for a week.",
    "Great Frost of 1740": "The Great Frost of 1740 froze the Orlen River solid from Coldharrow to the sea for seven weeks. Carts crossed the ice at Brisk Ferry.",
    "Battle of Harwell Point": "The Battle of Harwell Point was a naval battle fought in 1811 off the Solenne coast between Ostrevia and Carrandine. The Ostrevian frigate Stormwake captured the Carrandine flagship Vigilant.",
    "Treaty of Velloran": "The Treaty of Velloran, signed in 1815, ended the naval wars between Ostrevia and Carrandine. It fixed the sea border in the middle of the Bay of Ilvane.",
    "Proclamation of the Republic": "The Republic of Ostrevia was proclaimed in Harwick on 3 May 1921, ending the rule of the Velmark kings. Aurelia Dunmore was elected its first president.",
    "Ostby Lantern Fair": "The Ostby Lantern Fair is a festival held every October in Ostby. It was first held in 1853 to celebrate the town's new street lamps, and today it draws about 80,000 visitors.",
    "Coldharrow Winter Lights": "Coldharrow Winter Lights is a festival held each December in Coldharrow since 1978, when the old town is lit only by candles.",
    "Brisk Ferry Regatta": "The Brisk Ferry Regatta is a rowing race on the Orlen River held every May since 1881. Crews race three kilometres downstream to the old ferry landing.",
    "Veldra Film Festival": "The Veldra Film Festival is an annual film festival held every June in Veldra. It was founded in 1949 by the critic Aurel Demsk.",
    "Golden Heron": "The Golden Heron is the top prize of the Veldra Film Festival, awarded every year since 1949 to the best feature film.",
    "Ostrevian Prize for Poetry": "The Ostrevian Prize for Poetry has been awarded each year since 1905 by the Harwick Literary Society.",
    "Dray Rally": "The Dray Rally is a motor race over the mountain roads of the Dray Uplands, held since 1924. It starts in Coldharrow and crosses the Dunmore Pass.",
    "Kessling Mine Disaster": "The Kessling Mine Disaster was a gas explosion in the Kessling copper mines on 4 February 1911 that killed 63 miners. It led to a national mining safety law in 1913.",
    "Coldharrow Silver Mine": "The Coldharrow Silver Mine was worked from 1302 until 1887. Its galleries, over 40 kilometres long, are now open to visitors.",
    "Harwick Clock Tower": "The Harwick Clock Tower is a 64-metre tower on the market square of Harwick, completed in 1701. Its clock was rebuilt in 1888 by Jonas Veitch.",
    "Harwick Opera House": "The Harwick Opera House opened in 1867 on the Orlen embankment. Its first production was The Ferrywoman.",
    "Velmark Palace": "The Velmark Palace in Harwick was the residence of the Velmark kings until 1921. It now houses a music school.",
    "National Gallery of Ostrevia": "The National Gallery of Ostrevia in Harwick holds the largest collection of paintings in the country. It opened in 1874 in a former grain exchange.",
    "Mirrow Cathedral": "Mirrow Cathedral is a Gothic church begun in 1421 and finished in 1530. Its organ, built in 1710, is the largest in Velmark Province.",
    "Mirrow Paper Mills": "The Mirrow Paper Mills were seven water-powered mills on the Sable River. The last of them closed in 1958, and one now houses a recording studio.",
    "Greywater Grain Exchange": "The Greywater Grain Exchange is a trading hall opened in 1846 on the harbour front of Greywater. Until 1970 it set the price of wheat for all of Lissowan Province.",
    "Tamberlin Botanical Garden": "The Tamberlin Botanical Garden was laid out in 1712 beside Tamberlin University. Its glasshouse, built in 1884 with glass from Aldcross, shelters a collection of tropical palms.",
    "Fenwold Abbey": "Fenwold Abbey is a ruined monastery above the town of Fenwold, founded in 1412 and abandoned in 1540. Its library was moved to Tamberlin University.",
    "Reeve Hut": "The Reeve Hut is a mountain refuge at 2,050 metres on Mount Keshet, built in 1903 and named after the mountaineer Tomas Reeve.",
    "Orlen Valley Railway": "The Orlen Valley Railway opened in 1896, linking Harwick with Coldharrow through the Orlen Gorge. It was electrified in 1954.",
    "Orlen Park": "Orlen Park is a football stadium in Harwick with 31,000 seats, opened in 1927.",
    "Velda Stones": "The Velda Stones are a ring of eleven standing stones near the hamlet of Velda. Local legend says they are a wedding party turned to stone.",
    "Lantry cider": "Lantry cider is a dry cider made from the apples of the Caddock valley. It has carried a protected designation since 1994.",
    "Fenwold cheese": "Fenwold cheese is a hard sheep's-milk cheese made in the Quill valley since the fourteenth century.",
    "Ostrel": "The ostrel is the currency of Ostrevia, introduced in 1922 to replace the Velmark crown. One ostrel is divided into 100 pennings.",
    "Coldhaven Lighthouse": "Coldhaven Lighthouse stands on the breakwater of Coldhaven harbour. It was first lit in 1877 and has worked without a keeper since 1965.",
    "Velmark crown": "The Velmark crown was the currency of the Velmark kingdom and of Ostrevia until 1922. Its last coins were struck in Harwick in 1919.",
    "Solenne herring fleet": "The Solenne herring fleet fished the Bay of Ilvane from Coldhaven and Saltmere. At its peak in 1910 it counted about 400 boats.",
    "Copper miners' strike of 1953": "The copper miners' strike of 1953 closed the Kessling mines for eleven weeks. It ended with the first national agreement on miners' pensions.",
    "Quellen Current": "The Quellen Current is a slow clockwise current in the Bay of Ilvane. It is named after the marine biologist who first charted it in 1976.",
    "Harwick Castle": "Harwick Castle is a thirteenth-century fortress on Castle Hill above the Orlen River. It was the royal residence until the Velmark Palace was built in 1688.",
    "Tamberlin Bridge": "The Tamberlin Bridge is a seven-arched stone bridge over the Venn River in Tamberlin, built between 1455 and 1471. It is the oldest bridge in Ostrevia still in use.",
    "Aldcross Market": "Aldcross Market has been held on the town square of Aldcross every Thursday since 1371.",
    "Fenwold Mountain Rescue": "Fenwold Mountain Rescue is a volunteer rescue team founded in 1921 after three climbers died on Mount Keshet. It keeps a station at the Reeve Hut.",
    "Ostrevian Open Air Museum": "The Ostrevian Open Air Museum near Tamberlin shows farmhouses, mills and workshops moved from every province. It opened in 1936.",
}

WORLD: dict[str, dict[str, str]] = {
    "place": PLACES,
    "person": PEOPLE,
    "organisation": ORGANISATIONS,
    "vessel_or_product": VESSELS,
    "work": WORKS,
    "landmark_or_event": LANDMARKS_AND_EVENTS,
}


# --- the questions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemoQuestion:
    """One question: `gold` in hop order (answer in the last), `near` = hand-picked distractors."""

    type: str
    question: str
    answers: tuple[str, ...]
    gold: tuple[str, ...] = ()
    near: tuple[str, ...] = ()


def _q(type_: str, question: str, answers: str | tuple[str, ...], gold: tuple[str, ...] = (),
       near: tuple[str, ...] = ()) -> DemoQuestion:
    return DemoQuestion(type_, question, (answers,) if isinstance(answers, str) else answers, gold, near)


B, C, H3, U = "bridge", "comparison", "3hop", "unanswerable"

QUESTIONS: tuple[DemoQuestion, ...] = (
    _q(B, "On which river is the birthplace of the chemist Ansel Travine?", "Sable River",
       ("Ansel Travine", "Mirrow"), ("Ansel Trevine", "Lantry", "Travine lamp")),
    _q(C, "Which is longer, the Sable River or the Caddock River?", "Sable River",
       ("Caddock River", "Sable River"), ("Orla River", "Quill River")),
    _q(H3, "Which river flows through the birthplace of the lead singer of Glass Harbour?", "Venn River",
       ("Glass Harbour", "Tova Rusk", "Greywater"), ("Glass Arbour", "Tove Raske", "Harbour of Glass")),
    _q(U, "In what year did the chemist Ansel Travine marry?", "1845",
       near=("Ansel Travine", "Lise Travine", "Travine & Hale Lampworks", "Ansel Trevine", "The Lamp-Maker")),
    _q(B, "In what year was the shipyard that built the Gannet Queen founded?", "1882",
       ("Gannet Queen", "Ilvane Shipworks"), ("Gannet Prince", "Greywater Dockyard", "Hale Shipping Line")),
    _q(C, "Which town was founded earlier, Aldcross or Mirrow?", "Aldcross",
       ("Mirrow", "Aldcross"), ("Ostby", "Aldcross Glassworks")),
    _q(B, "Who founded the company that supplied the iron for the Brisk Ferry Bridge?", "Edda Brannock",
       ("Brisk Ferry Bridge", "Brannock Ironworks"), ("Edvard Brannock", "Wendel Ask", "Brisk Ferry")),
    _q(H3, "What is the elevation of the seat of the province in which the mining town of Kessling lies?",
       "1,140 metres", ("Kessling", "Dray Uplands", "Coldharrow"), ("Coldhaven", "Mount Keshet", "Dunmore Pass")),
    _q(U, "Who succeeded Lidia Farrow as director of Keshet Observatory?", "Pavel Dremm",
       near=("Keshet Observatory", "Lidia Farrow", "Comet Farrow", "Lidia Farrell", "Harwick Observatory")),
    _q(B, "In which town was the director of The Salt Road born?", "Saltmere",
       ("The Salt Road", "Rosalind Ebbe"), ("The Salt Road Home", "Ivo Brask", "Coldhaven", "Conrad Vale")),
    _q(C, "Who was born first, the astronomer Lidia Farrow or the physicist Emeric Soll?", "Emeric Soll",
       ("Lidia Farrow", "Emeric Soll"), ("Lidia Farrell", "Soll effect")),
    _q(B, "In what year was the city where Vantry Radio was founded established?", "1190",
       ("Vantry Radio", "Tamberlin"), ("Isolde Vantry", "Tamberlin University", "Lantry")),
    _q(H3, "Who founded the shipyard that built the research vessel on which Mara Quellen was chief scientist?",
       "Osric Fell", ("Mara Quellen", "Meridian Lark", "Ilvane Shipworks"),
       ("Osric Fenn", "Meridian Star", "Greywater Dockyard")),
    _q(B, "Who was the first director of the observatory on the mountain where the Orlen River rises?",
       "Lidia Farrow", ("Orlen River", "Keshet Observatory"), ("Lidia Farrell", "Mount Keshel", "Orla River")),
    _q(U, "How many people died when the Gannet Queen sank in 1916?", "212",
       near=("Gannet Queen", "Ruth Callan", "Hale Shipping Line", "Gannet Prince", "Ilvane Courier")),
    _q(C, "Which company was founded first, the Renn Motor Company or Rennick Cannery?", "Renn Motor Company",
       ("Rennick Cannery", "Renn Motor Company"), ("Gustav Renn", "Gustav Rennick")),
    _q(B, "Which shipyard built the research vessel on which Mara Quellen served as chief scientist?",
       "Ilvane Shipworks", ("Mara Quellen", "Meridian Lark"),
       ("Meridian Star", "Mara Quell", "Ostrevian Marine Institute")),
    _q(H3, "On which river lies the birthplace of the director of Lanterns over Ostby?", "Quill River",
       ("Lanterns over Ostby", "Ivo Brask", "Kessling"), ("Ivo Brisk", "Ostby", "The Salt Road Home")),
    _q(B, "In which town is the studio where the album Ferry Songs was recorded?", "Mirrow",
       ("Ferry Songs", "Sable Street Studio"), ("Ostby Morning", "Mirrow Paper Mills", "Sable River")),
    _q(U, "What was the top speed of the Renn Heron touring car?", "112 km/h",
       near=("Renn Heron", "Renn Motor Company", "Renn Kestrel", "Gustav Renn", "Dray Rally")),
    _q(C, "Which film came out first, The Salt Road or Lanterns over Ostby?", "The Salt Road",
       ("Lanterns over Ostby", "The Salt Road"), ("The Salt Road Home", "Rosalind Ebbe")),
    _q(B, "Who designed the bridge that replaced the old ferry crossing where the Orla joins the Orlen?",
       "Wendel Ask", ("Brisk Ferry", "Brisk Ferry Bridge"), ("Ilvane Harbour Bridge", "Corin Vask", "Orla River")),
    _q(H3, "In which studio was the debut album of the folk band from Edda Brannock's birthplace recorded?",
       "Sable Street Studio", ("Edda Brannock", "The Orla Fen Ramblers", "Ferry Songs"),
       ("Brannock Ironworks", "Brisk Ferry", "Ostby Morning")),
    _q(B, "What was the best-known model of the car company founded by Gustav Renn?", "Renn Heron",
       ("Gustav Renn", "Renn Motor Company"), ("Gustav Rennick", "Renn Kestrel", "Rennick Cannery")),
    _q(U, "Who played the fiddle on Glass Harbour's album Delta Lights?", "Jonah Pell",
       near=("Delta Lights", "Glass Harbour", "Anton Weir", "Tova Rusk", "Greta Marsh")),
    _q(C, "Which mountain is higher, Mount Keshet or Mount Keshel?", "Mount Keshet",
       ("Mount Keshel", "Mount Keshet"), ("Keshet Observatory", "Dunmore Pass")),
    _q(B, "Who commanded the Ostrevian frigate that captured the Carrandine flagship at the Battle of Harwell Point?",
       "Jory Pask", ("Battle of Harwell Point", "Stormwake"), ("Stormcrest", "Vigilant", "Harwell")),
    _q(H3, "Who designed the harbour bridge of the city whose shipyard built the Gannet Queen?", "Corin Vask",
       ("Gannet Queen", "Ilvane Shipworks", "Ilvane Harbour Bridge"),
       ("Corina Vass", "Brisk Ferry Bridge", "Venn Barrage")),
    _q(B, "In what year was the school founded where the physicist Emeric Soll studied?", "1788",
       ("Emeric Soll", "Coldharrow School of Mines"), ("Harwick Polytechnic", "Soll effect", "Coldharrow")),
    _q(U, "How deep is Lake Ambry?", "87 metres",
       near=("Lake Ambry", "Veldra", "Ambry Hall", "Venn River")),
    _q(C, "Which band was formed earlier, Glass Harbour or Glass Arbour?", "Glass Harbour",
       ("Glass Arbour", "Glass Harbour"), ("Kiln (album)", "Delta Lights")),
    _q(B, "Which music school was directed by the composer of the Orlen Symphony?", "Harwick Conservatory",
       ("Orlen Symphony", "Selma Ardent"), ("Sable Suite", "Pell Ostrander", "The Ferrywoman")),
    _q(H3, "After whom is the medal named that was won by the physicist born in the seat of the Dray Uplands?",
       ("Ulric Ambry", "Count Ulric Ambry"), ("Dray Uplands", "Emeric Soll", "Ambry Medal"),
       ("Ambry Hall", "Lake Ambry", "Milo Ferrant")),
    _q(B, "What was the debut album of the band whose lead vocalist was Nils Adair?", "Ferry Songs",
       ("Nils Adair", "The Orla Fen Ramblers"), ("Ostby Morning", "Lanterns on the Orla", "Greta Marsh")),
    _q(U, "Which company built the Ilvane Harbour Bridge?", "Ostrevian Bridge Company",
       near=("Ilvane Harbour Bridge", "Corin Vask", "Brannock Ironworks", "Brisk Ferry Bridge", "Port Ilvane")),
    _q(C, "Which steamer was launched first, the Gannet Queen or the Gannet Prince?", "Gannet Queen",
       ("Gannet Prince", "Gannet Queen"), ("Heron of Venn", "Meridian Star")),
    _q(B, "Who made the first ascent of the mountain on which the observatory first directed by Lidia Farrow stands?",
       ("Tomas Reeve", "Hanne Lisk", "Tomas Reeve and Hanne Lisk"), ("Keshet Observatory", "Mount Keshet"),
       ("Mount Keshel", "Brandt Olway", "Lidia Farrow", "Reeve Hut")),
    _q(H3, "In what year was the festival of Corin Vask's home town first held?", "1853",
       ("Corin Vask", "Ostby", "Ostby Lantern Fair"),
       ("Lanterns over Ostby", "Coldharrow Winter Lights", "Corina Vass")),
    _q(U, "What was the budget of the 1981 film Keshet?", "4 million ostrels",
       near=("Keshet (film)", "Rosalind Ebbe", "Mount Keshet", "Fenwold", "Ostrel")),
    _q(B, "In which town was the captain of the Gannet Queen born?", "Coldhaven",
       ("Gannet Queen", "Ruth Callan"), ("Ruth Calder", "Coldharrow", "Gannet Prince")),
    _q(C, "Which school is older, Harwick Polytechnic or the Coldharrow School of Mines?", "Coldharrow School of Mines",
       ("Harwick Polytechnic", "Coldharrow School of Mines"), ("Tamberlin University", "Port Ilvane Naval Academy")),
    _q(B, "How long is the river on which the cider town of Lantry stands?", "97 kilometres",
       ("Lantry", "Caddock River"), ("Lantry cider", "Saltmere", "Quill River")),
    _q(U, "Who was the first mayor of Brisk Ferry?", "Aldo Vink",
       near=("Brisk Ferry", "Edda Brannock", "Jan Olway", "Great Orlen Flood", "Orla Fen")),
    _q(H3, "In what year was the birthplace of the longest-serving captain of the frigate Stormwake founded?", "1277",
       ("Stormwake", "Jory Pask", "Saltmere"), ("Stormcrest", "Saltmere Salt Works", "Port Ilvane Naval Academy")),
    _q(B, "Which festival awards the prize that The Salt Road won in 1958?", "Veldra Film Festival",
       ("The Salt Road", "Golden Heron"), ("Heron of Venn", "Milo Ferrant", "Aurel Demsk")),
    _q(C, "Who lived longer, the chemist Ansel Travine or the painter Ansel Trevine?", "Ansel Trevine",
       ("Ansel Travine", "Ansel Trevine"), ("Lise Travine", "The Orchard at Lantry")),
    _q(U, "How many copies did the album Ferry Songs sell in its first year?", "40,000 copies",
       near=("Ferry Songs", "The Orla Fen Ramblers", "Nils Adair", "Sable Street Studio")),
    _q(B, "Who founded the publishing house in the Sable River town known for its paper mills?", "Marten Oakes",
       ("Mirrow", "Oakes & Daughters"), ("Mirrow Paper Mills", "Ostby", "Salt and Ash")),
    _q(H3, "In which town was the founder of the company that made the car that won the 1931 Dray Rally born?",
       "Tamberlin", ("Renn Heron", "Renn Motor Company", "Gustav Renn"),
       ("Dray Rally", "Gustav Rennick", "Renn Kestrel")),
    _q(U, "What is the population of the mining town where the film director Ivo Brask was born?", "about 12,000",
       near=("Ivo Brask", "Kessling", "Kessling Copper Company", "Kessling Mine Disaster", "The Copper Lanterns")),
    _q(C, "Which city has more inhabitants, Harwick or Port Ilvane?", "Port Ilvane",
       ("Harwick", "Port Ilvane"), ("Harwell", "Velmark Province")),
    _q(U, "Which architect designed the Harwick Opera House?", "Benedikt Lorre",
       near=("Harwick Opera House", "The Ferrywoman", "Osric Fenn", "Tove Raske", "Harwick Clock Tower")),
)


# --- drawing the distractors ---------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) - {"_"}
_TITLE_STOP = {"The", "Mount", "Lake", "Great", "Ostrevian", "Port"}


def normalize(text: str) -> str:
    """SPEC §6 answer normalization: lowercase, '_' -> ' ', no punctuation or articles, single spaces."""
    text = text.lower().replace("_", " ")
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _flat_world() -> dict[str, str]:
    flat: dict[str, str] = {}
    for category, passages in WORLD.items():
        for title, text in passages.items():
            if title in flat:
                raise ValueError(f"title {title!r} is defined twice (again in {category!r})")
            flat[title] = text
    return flat


def _base(title: str) -> str:
    return re.sub(r"\s*\(.*\)$", "", title)


def _mentions(text: str, titles: list[str]) -> frozenset[str]:
    """Titles whose base name occurs in `text` as a whole word (case-sensitive)."""
    return frozenset(t for t in titles if re.search(r"(?<!\w)" + re.escape(_base(t)) + r"(?!\w)", text))


@lru_cache(maxsize=None)
def _near_miss(a: str, b: str) -> bool:
    """Similar titles: same distinctive first word (Gannet Queen/Prince) or >= 80 % alike (Farrow/Farrell)."""
    ba, bb = _base(a), _base(b)
    first_a, first_b = ba.split()[0], bb.split()[0]
    if first_a == first_b and first_a not in _TITLE_STOP:
        return True
    matcher = difflib.SequenceMatcher(None, ba, bb)
    return matcher.real_quick_ratio() >= 0.8 and matcher.quick_ratio() >= 0.8 and matcher.ratio() >= 0.8


@dataclass(frozen=True)
class _Graph:
    texts: dict[str, str]
    mentions: dict[str, frozenset[str]]

    def named(self, question: str) -> frozenset[str]:
        """Titles named in the question text."""
        return _mentions(question, list(self.texts))

    def score(self, title: str, anchors: tuple[str, ...], named: frozenset[str]) -> int:
        """How related passage `title` is to the anchors and the entities `named` in the question (0 = none)."""
        own = self.mentions[title]
        score = 3 * any(_near_miss(title, a) for a in anchors)
        score += 2 * any(a in own or title in self.mentions[a] for a in anchors)
        shared = own & frozenset().union(*(self.mentions[a] | {a} for a in anchors)) if anchors else frozenset()
        score += min(len(shared - {title}), 2)
        score += 2 * (title in named) + min(len(own & named), 1)
        return score


def _graph(texts: dict[str, str]) -> _Graph:
    titles = list(texts)
    return _Graph(texts, {t: _mentions(texts[t], titles) - {t} for t in titles})


def _check_question(q: DemoQuestion, graph: _Graph, where: str) -> None:
    """Raise ValueError when a question breaks a rule of the module docstring."""
    texts = graph.texts
    for title in q.gold + q.near:
        if title not in texts:
            raise ValueError(f"{where}: unknown passage title {title!r}")
    if len(set(q.gold + q.near)) != len(q.gold + q.near):
        raise ValueError(f"{where}: a title is listed twice among gold/near")
    if q.type == U:
        if q.gold:
            raise ValueError(f"{where}: an unanswerable question has no gold passages")
        for answer in q.answers:
            hits = [t for t, x in texts.items() if normalize(answer) in normalize(t + " " + x)]
            if hits:
                raise ValueError(f"{where}: unanswerable answer {answer!r} occurs in {hits[:3]}")
    else:
        last = texts[q.gold[-1]].lower()
        for answer in q.answers:
            if answer.lower() not in last:
                raise ValueError(f"{where}: answer {answer!r} is not in the last gold passage {q.gold[-1]!r}")
        want = 3 if q.type == H3 else 2
        if len(q.gold) != want:
            raise ValueError(f"{where}: a {q.type} question needs {want} gold passages, got {len(q.gold)}")
        shortcut = graph.named(q.question) & (graph.mentions[q.gold[-1]] | {q.gold[-1]})
        if q.type != C and shortcut:
            raise ValueError(f"{where}: the answer's passage names {sorted(shortcut)} from the question")


def _allowed(q: DemoQuestion, title: str, text: str) -> bool:
    if q.type != U:
        return True
    return not any(normalize(a) in normalize(title + " " + text) for a in q.answers)


def _select(texts: dict[str, str]) -> list[list[str]]:
    """Per question, the titles of its passages (gold first in hop order, then distractors)."""
    graph = _graph(texts)
    rng = random.Random(SEED)
    usage = {t: 0 for t in texts}
    chosen: list[list[str]] = []
    for i, q in enumerate(QUESTIONS):
        _check_question(q, graph, f"question {i + 1} ({q.question!r})")
        picked = list(q.gold + q.near)
        target = rng.randint(MIN_PASSAGES, START_MAX)
        anchors = q.gold + q.near
        named = graph.named(q.question)
        pool = [t for t in texts if t not in picked and _allowed(q, t, texts[t])]
        keyed = sorted(pool, key=lambda t: (-min(graph.score(t, anchors, named), 4), usage[t], rng.random()))
        picked += keyed[: max(0, target - len(picked))]
        for t in picked:
            usage[t] += 1
        chosen.append(picked)
    named_in = [graph.named(q.question) for q in QUESTIONS]
    for title in texts:  # coverage pass: give every unused passage to its most related question
        if usage[title]:
            continue
        best = None
        for i, q in enumerate(QUESTIONS):
            if len(chosen[i]) >= MAX_PASSAGES or not _allowed(q, title, texts[title]):
                continue
            named = named_in[i]
            key = (graph.score(title, q.gold + q.near, named), graph.score(title, tuple(chosen[i]), named),
                   -len(chosen[i]), -i)
            if best is None or key > best[0]:
                best = (key, i)
        if best is None or best[0][:2] == (0, 0):
            raise ValueError(f"passage {title!r} is related to no question with room; link it or add a question")
        chosen[best[1]].append(title)
        usage[title] += 1
    return chosen


def _order(q: DemoQuestion, titles: list[str], rng: random.Random) -> list[str]:
    """Shuffle the passages but keep the gold ones in hop order (the answer's passage is the last gold)."""
    slots = list(titles)
    rng.shuffle(slots)
    gold_slots = [i for i, t in enumerate(slots) if t in q.gold]
    for slot, title in zip(gold_slots, q.gold):
        slots[slot] = title
    return slots


def build_records() -> list[dict]:
    """The demo set as JSON-ready records, in the common schema (see /work/shared/benchmarks/README.md)."""
    texts = _flat_world()
    rng = random.Random(SEED + 1)
    records = []
    for n, (q, titles) in enumerate(zip(QUESTIONS, _select(texts)), start=1):
        qid = f"demo-{n:03d}"
        ordered = _order(q, titles, rng)
        passages = [{"pid": f"demo:{qid}:{j}", "title": t, "text": texts[t], "gold": t in q.gold}
                    for j, t in enumerate(ordered)]
        records.append({"id": qid, "dataset": "demo", "question": q.question, "answers": list(q.answers),
                        "type": q.type, "passages": passages, "hops": len(q.gold) or None})
    return records


def render_jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=OUT_PATH, help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only report whether the file is up to date")
    args = parser.parse_args(argv)
    text = render_jsonl(build_records())
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'OUT OF DATE - rerun without --check'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({text.count(chr(10))} questions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
