"""Irregular verb forms no stemmer joins to their verb (found → find, нашла → найти):
a general table of common English and Russian verbs, in the spirit of Lucene's
StemmerOverrideFilter (docs/design.md §6.1). Forms that are as often another word
(rose, left, saw, ground, wound, lay, bit, bore, bent, fed, met, shot, spat, drunk…) are
left out: a false match costs more than a miss.
"""

from __future__ import annotations

# base: its irregular past and participle forms
_ENGLISH = """
arise arose arisen|awake awoke awoken|bear borne|beat beaten|become became|begin began begun
bite bitten|bleed bled|blow blew blown|break broke broken|breed bred|bring brought
build built|burn burnt|buy bought|catch caught|choose chose chosen|come came|creep crept|deal dealt
dig dug|draw drew drawn|dream dreamt|drink drank|drive drove driven|eat ate eaten
fall fallen|fight fought|find found|flee fled|fling flung|fly flew flown
forbid forbade forbidden|forget forgot forgotten|forgive forgave forgiven|freeze froze frozen
get got gotten|give gave given|go went gone|grow grew grown|hang hung|hear heard|hide hid hidden
hold held|keep kept|kneel knelt|know knew known|leap leapt|lend lent|lose lost|make made
pay paid|ride rode ridden|rise risen|run ran|say said|see seen|seek sought|sell sold
send sent|sew sewn|shake shook shaken|shine shone|show shown|shrink shrank shrunk
sing sang sung|sink sank sunk|sit sat|slay slew slain|sleep slept|slide slid|sling slung
speak spoke spoken|speed sped|spend spent|spill spilt|spin spun|stand stood
steal stole stolen|sting stung|stink stank stunk|strike struck stricken|strive strove striven
swear swore sworn|sweep swept|swim swam swum|swing swung|take took taken|teach taught|tell told
think thought|throw threw thrown|tread trod trodden|understand understood|wake woke woken
wear wore worn|weave wove woven|weep wept|win won|wring wrung|write wrote written
"""
_RUSSIAN = """
найти нашёл нашла нашло нашли нашел|идти шёл шла шло шли шел|пойти пошёл пошла пошло пошли пошел
прийти пришёл пришла пришло пришли пришел|уйти ушёл ушла ушло ушли ушел
войти вошёл вошла вошло вошли вошел|выйти вышел вышла вышло вышли|зайти зашёл зашла зашли зашел
украсть украл украла украло украли|красть крал крала крали|упасть упал упала упали
класть клал клала клали|сесть сел села сели|лечь лёг легла легли лег|взять взял взяла взяли
"""


def _table(text: str) -> dict:
    out = {}
    for entry in text.replace("\n", "|").split("|"):
        words = entry.split()
        for form in words[1:]:
            out[form] = words[0]
    return out


#: form -> its verb
FORMS = {**_table(_ENGLISH), **_table(_RUSSIAN)}
