"""Text that addresses a model, for the strings a success result keeps: the error path's
phrasings (``redaction.looks_like_instructions``) and more of them, in English, Arabic,
Spanish, German, French, Japanese, Russian and Chinese.

The patterns read a view of the text (``adapters/untrusted.views``): case-folded,
accents and Arabic vowel marks folded, look-alike letters mapped. A hit withholds the
field; a phrase a business text also uses ("please ignore the previous reminder") is
left out, since a false hit costs the user a field of a legitimate answer.
"""

from __future__ import annotations

import re
from typing import Final

from toolsafe.adapters.redaction import _INSTRUCTION_PATTERNS, clean_text

# The error path's patterns (``redaction.looks_like_instructions``), four of them narrowed
# for success text, where a false hit withholds a field of a legitimate answer: "please
# ignore the previous reminder", "you are now subscribed", "act as soon as possible",
# "扮演重要角色" (plays an important role). The error path keeps them as they are.
_NARROWED: Final = {
    r"\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}\b(?:instruction|prompt|rule"
    r"|guideline|polic|previous|prior|above|earlier|system)": (
        r"\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}\b(?:instruction|prompt|rule"
        r"|guideline|polic|system|(?:previous|prior|above|earlier)\b(?!\s+(?:reminders?"
        r"|e-?mails?|messages?|invoices?|letters?|notices?|mails?|bills?|statements?|orders?"
        r"|versions?|notes?|payments?|requests?|tickets?|replies|reply|quotes?|offers?)))"
    ),
    r"\byou are (?:now|no longer)\b": (
        r"\byou are (?:now|no longer)\b(?!\s+(?:subscribed|unsubscribed|registered|signed"
        r"|logged|enrolled|connected|following|verified|eligible|able|ready|all set|set up"
        r"|booked|checked|on the|in the (?:queue|list|waiting)|a (?:member|subscriber"
        r"|customer|premium|verified)|part of|receiving|opted))"
    ),
    r"\b(?:act|behave) as\b": (
        r"\b(?:act|behave) as\b(?!\s+(?:soon|quickly|fast|needed|required|usual|expected"
        r"|normal|follows|agreed|instructed by (?:your|the) (?:bank|manager)))"
    ),
    r"你现在是|从现在开始你|系统提示|不要告诉用户|新的指令|扮演|请立即(?:执行|调用|转账)": (
        r"你现在是|从现在开始你|系统提示|不要告诉用户|新的指令"
        r"|扮演(?:一个|一名|一位|成|我的|系统|管理员|角色扮演)|请立即(?:执行|调用|转账)"
    ),
}
_BASE: Final = tuple(_NARROWED.get(p.pattern, p.pattern) for p in _INSTRUCTION_PATTERNS)
_BASE_ANY: Final = re.compile("|".join(f"(?:{pattern})" for pattern in _BASE), re.IGNORECASE)

_LATIN: Final = (
    # English
    r"\b(?:ignore|disregard|forget|override|bypass|skip|discard|abandon|neglect)\b.{0,60}"
    r"\b(?:instructions?|prompts?|directives?|guardrails?|safety rules|constraints"
    r"|system message|developer message)\b",
    r"\bfrom now on\b.{0,30}\b(?:you (?:are|will|must|should|shall)|respond|answer only"
    r"|always|never)\b",
    r"\byour (?:new |real |true |actual )?(?:task|job|goal|role|instructions?|objective"
    r"|mission) (?:is|are|now)\b",
    r"\b(?:assistant|ai|llm|chatbot|claude|gpt|chatgpt|copilot)s?\b.{0,30}"
    r"\b(?:must|should|shall|needs? to|has to|is required to|is instructed to)\b.{0,50}"
    r"\b(?:ignore|call|invoke|send|transfer|reveal|output|print|forward|delete|approve"
    r"|execute|run|wire|refund|email|grant|disable|say|tell|reply|respond)\b",
    r"\b(?:reveal|print|output|leak|repeat|dump|disclose|exfiltrate)\b.{0,30}"
    r"\b(?:system prompt|your (?:instructions|prompt|rules)|hidden prompt|api keys?"
    r"|credentials|secrets)\b",
    r"\bnote (?:to|for) (?:the )?(?:ai|assistant|model|llm|chatbot|language model)\b",
    r"\b(?:attention|hey|dear|hello|hi)\W{0,3}(?:ai|assistant|llm|chatgpt|claude|gpt"
    r"|language model|chatbot)\b",
    r"\b(?:important|urgent|critical)\W{0,3}(?:new )?(?:instructions?|message|notice)"
    r" (?:for|to) (?:the |all )?(?:ai|assistants?|models?|agents?|llms?)\b",
    r"\b(?:immediately|now|silently|quietly)\s+(?:call|invoke|execute|run|use|trigger)\b"
    r".{0,30}\b(?:tool|function|api|command|action)\b",
    r"\b(?:silently|quietly|secretly)\s+(?:send|forward|transfer|wire|email|refund|delete"
    r"|approve|grant)\b",
    r"\bdo not (?:tell|inform|show|mention|reveal|alert|notify|let)\b.{0,30}"
    r"\b(?:user|human|operator|customer|anyone|them)\b",
    r"\b(?:admin|developer|god|sudo|unrestricted|jailbreak|jailbroken|dan) mode\b",
    r"\b(?:end|begin|start) of (?:the )?(?:system|user|assistant|developer) "
    r"(?:prompt|message|instructions?)\b",
    r"\[(?:system|assistant|admin|developer|instructions?)\]|<\/?(?:system|instructions?"
    r"|admin|assistant|developer)>",
    r"\b(?:system|admin|developer|security) (?:override|message|notice|instruction|update)"
    r"\s*:",
    r"\bno (?:longer )?(?:bound|restricted|limited) by\b",
    r"\b(?:respond|reply|answer) only with\b",
    # Spanish (accents folded)
    r"\b(?:ignora|ignore|ignorar|ignoren|olvida|olvide|olvidar|olviden|omite|omita|descarta"
    r"|desatiende|haz caso omiso de|no hagas caso a?)\b.{0,40}\b(?:instrucciones|instruccion"
    r"|indicaciones|reglas|ordenes|directrices|prompt|mensaje del sistema)\b",
    r"\bahora eres\b|\ba partir de ahora\b.{0,30}\b(?:eres|debes|responde|actua)\b"
    r"|\bnuevas instrucciones\b|\bno (?:le )?(?:digas|informes|cuentes|menciones|avises)"
    r"\b.{0,20}\busuario\b|\b(?:mensaje|prompt|indicacion) del sistema\b|\bactua como\b"
    r"|\bfinge (?:que eres|ser)\b|\b(?:transfiere|envia|llama|ejecuta) (?:de )?inmediatamente"
    r"\b|\brevela\b.{0,30}\b(?:instrucciones|contrasena|clave|prompt)\b|\bmodo desarrollador"
    r"\b|\b(?:asistente|modelo|ia)\b.{0,20}\bdebe(?:s|ra)?\b.{0,30}\b(?:ignorar|transferir"
    r"|enviar|llamar|revelar|aprobar)\b",
    # German (umlauts folded: "überweise" reads "uberweise")
    r"\b(?:ignoriere|ignorieren sie|ignoriert|vergiss|vergessen sie|missachte|missachten sie"
    r"|uberspringe|verwirf|verwerfen sie)\b.{0,50}\b(?:anweisung|anweisungen|instruktion"
    r"|instruktionen|regeln|vorgaben|richtlinien|systemprompt|system-prompt|befehle)\b",
    r"\bdu bist (?:jetzt|nun|ab sofort|ab jetzt)\b|\bab (?:sofort|jetzt) (?:bist du|antwortest"
    r" du|musst du|sollst du)\b|\bneue anweisung(?:en)?\b|\bsystem-?(?:prompt|nachricht|anweisung)"
    r"\b|\b(?:sag|sage|verrate|erzahle)\b.{0,10}\b(?:dem|der) (?:nutzer|benutzer|kunden|kundin)"
    r"\b.{0,10}\bnichts\b|\bverrate\b.{0,30}\b(?:anweisungen|passwort|schlussel|prompt)\b"
    r"|\btu so,? als\b|\bgib dich als\b|\b(?:uberweise|sende|rufe) (?:sofort|umgehend)\b"
    r"|\bentwicklermodus\b|\b(?:assistent|ki|modell)\b.{0,20}\b(?:muss|soll|sollst|musst)\b"
    r".{0,40}\b(?:ignorieren|uberweisen|senden|aufrufen|verraten|freigeben)\b",
    # French (accents folded)
    r"\b(?:ignore|ignorez|ignorer|oublie|oubliez|oublier|ne tiens pas compte des?"
    r"|ne tenez pas compte des?|fais abstraction des?|faites abstraction des?)\b.{0,50}"
    r"\b(?:instructions?|consignes?|regles|directives|prompt|message systeme)\b",
    r"\b(?:tu es|vous etes) (?:maintenant|desormais|a present)\b|\bnouvelles? (?:instructions"
    r"|consignes)\b|\b(?:a partir de maintenant|desormais),? (?:tu|vous) (?:es|etes|dois"
    r"|devez|reponds|repondez)\b|\bne (?:dis|dites) rien a l'utilisateur\b|\bn'informe"
    r" pas l'utilisateur\b|\bne previens pas l'utilisateur\b|\b(?:invite|message|prompt)"
    r" systeme\b|\bagis comme\b|\bfais semblant d'etre\b|\brevele\b.{0,30}\b(?:instructions"
    r"|mot de passe|cle|prompt)\b|\b(?:vire|virez|envoie|appelle) immediatement\b"
    r"|\bmode developpeur\b|\b(?:assistant|modele|ia)\b.{0,20}\b(?:doit|dois)\b.{0,40}"
    r"\b(?:ignorer|virer|envoyer|appeler|reveler|approuver)\b",
)

_ARABIC: Final = (
    # Arabic (vowel marks and the elongation stroke folded out)
    r"(?:تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي|اهمل|أهمل|اهملي|تخط|تخطى|تجاوز|لا تلتزم)"
    r"\s.{0,40}(?:التعليمات|تعليمات|الأوامر|الاوامر|أوامر|اوامر|القواعد|قواعد|الإرشادات"
    r"|الارشادات|التوجيهات|موجه النظام)",
    r"أنت الآن|انت الآن|أنت الان|انت الان|من الآن فصاعدا|من الان فصاعدا|من الآن فصاعداً"
    r"|تعليمات جديدة|التعليمات الجديدة|موجه النظام|رسالة النظام|لا تخبر المستخدم"
    r"|لا تخبري المستخدم|لا تعلم المستخدم|لا تبلغ المستخدم|لا تذكر للمستخدم|تظاهر بأنك"
    r"|تظاهر انك|تصرف كأنك|تصرف ك(?:مساعد|مسؤول|مدير)|بصفتك نموذج|أيها المساعد|ايها المساعد"
    r"|أيها الذكاء الاصطناعي|ايها الذكاء الاصطناعي|(?:قم|يجب عليك)\s.{0,10}(?:فورا|فوراً|حالا)"
    r"|اكشف\s.{0,20}(?:التعليمات|كلمة المرور|المفاتيح)|وضع المطور",
)

_CYRILLIC: Final = (
    # Russian
    r"(?:игнорируй|игнорируйте|проигнорируй|проигнорируйте|забудь|забудьте"
    r"|не обращай внимания на|не обращайте внимания на|отбрось|отбросьте|пренебреги"
    r"|не следуй|не выполняй).{0,50}(?:инструкц|указани|правил|системн|промпт|команд)",
    r"теперь ты|ты теперь|отныне ты|с этого момента ты|новые инструкции|новая инструкция"
    r"|системный промпт|системное сообщение|системная подсказка|не говори пользователю"
    r"|не сообщай пользователю|ничего не говори пользователю|не рассказывай пользователю"
    r"|притворись|веди себя как|действуй как|режим разработчика|немедленно (?:переведи"
    r"|вызови|отправь|выполни|перечисли)|раскрой.{0,30}(?:инструкц|пароль|ключ|промпт)"
    r"|(?:ассистент|модель|ии)\s.{0,20}(?:должен|должна|обязан).{0,40}(?:переве|отправ|вызв"
    r"|раскр|игнор|одобр)",
)

_CJK: Final = (
    # Japanese
    r"(?:指示|命令|ルール|指令|プロンプト|制約|ガイドライン).{0,12}(?:無視|忘れ|破棄|従わ)"
    r"|(?:無視|忘れ).{0,12}(?:指示|命令|プロンプト|ルール)|あなたは(?:今から|これから|今|もう)"
    r"|(?:今から|これから)(?:あなた|君|お前)は|新しい指示|新たな指示|システムプロンプト"
    r"|システムメッセージ|ユーザーに(?:は)?(?:言わ|伝え|知らせ|教え|報告し)な|ユーザーには黙"
    r"|直ちに.{0,10}(?:送金|振り込|振込|実行|呼び出)|すぐに.{0,6}(?:送金|振り込|振込)"
    r"|(?:として|のように)(?:振る舞|ふるま|行動し)|開発者モード|制限を解除|制限なし"
    r"|(?:アシスタント|AI|ai|モデル)(?:は|が).{0,20}(?:しなければ|すること|せよ|しろ)",
    # Chinese (simplified and traditional)
    r"(?:忽略|无视|無視|忽视|忽視|不要理会|不要理會|忘记|忘記|跳过|跳過|不要遵守|不要遵循)"
    r".{0,12}(?:指令|指示|说明|說明|提示|规则|規則|要求|设定|設定|命令|约束|約束)",
    r"你现在是|你現在是|从现在开始|從現在開始|从现在起|從現在起|系统提示|系統提示|系统消息"
    r"|系統訊息|不要告诉用户|不要告訴用戶|不要告诉使用者|不要告訴使用者|别告诉用户|新的指令"
    r"|新指令|新的指示|假装你是|假裝你是|立即(?:转账|轉賬|轉帳|汇款|匯款|调用|調用|执行|執行"
    r"|发送|發送)|(?:泄露|洩露|透露|输出|輸出).{0,10}(?:密码|密碼|指令|提示词|提示詞|系统提示)"
    r"|开发者模式|開發者模式|(?:助手|模型|人工智能|AI|ai)(?:必须|必須|应该|應該|需要).{0,20}"
    r"(?:转账|轉賬|忽略|调用|調用|发送|發送|批准)",
)


def _one_of(patterns: tuple[str, ...], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns), re.IGNORECASE | flags)


# One regex per script, each run only on text that holds that script; the Latin one in
# its ASCII-only form on ASCII text (the same answers there, in about half the time).
_LATIN_ANY: Final = _one_of(_LATIN)
# The error path's patterns (narrowed) and the Latin ones, in one scan of ASCII text.
_ASCII_ALL: Final = _one_of(_BASE + _LATIN, re.ASCII)
_BY_SCRIPT: Final = (
    (re.compile("[\u0600-\u06ff]"), _one_of(_ARABIC)),
    (re.compile("[\u0400-\u04ff]"), _one_of(_CYRILLIC)),
    (re.compile("[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]"), _one_of(_CJK)),
)

# Letters only, run together: "I g n o r e a l l p r e v i o u s" and look-alikes split
# by punctuation read the same.
_COMPACT: Final = re.compile(
    r"(?:ignore|disregard|forget)(?:all|any|the|your|my|these|those|of|every)*"
    r"(?:previous|prior|above|earlier|former)(?:instructions|prompts|rules|directives)"
)
_LETTERS: Final = re.compile(r"[^a-z]")


def addresses_a_model(view: str) -> bool:
    """Whether ``view`` reads like an attempt to instruct a model."""
    folded = clean_text(view).casefold()
    if folded.isascii():
        if _ASCII_ALL.search(folded):
            return True
    elif (
        _BASE_ANY.search(folded)
        or _LATIN_ANY.search(folded)
        or any(script.search(folded) and patterns.search(folded) for script, patterns in _BY_SCRIPT)
    ):
        return True
    return len(folded) >= 20 and _COMPACT.search(_LETTERS.sub("", folded)) is not None
