"""Write the sample inputs in data/: sample_prompts.jsonl (300 rows) and sample_batch.jsonl (OpenAI batch format).

Everything here was written for this project. Some rows come from templates with varied names and numbers; the
output is deterministic (a fixed seed), so rerunning the script reproduces the committed files byte for byte.

    python3 scripts/make_sample_data.py [--out data]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

TOTAL = 300

# ---------------------------------------------------------------- hand-written prompts: (category, lang, text)

WRITTEN: list[tuple[str, str, str]] = [
    ("math", "en", "What is the sum of the interior angles of a convex decagon? Show how you get it."),
    ("math", "en", "Prove that the square root of 2 is irrational."),
    ("math", "en", "Find all real x such that x^2 - 5x + 6 = 0, and check both answers."),
    (
        "math",
        "en",
        "How many ways can 8 people sit around a round table if two particular people refuse to sit "
        "next to each other?",
    ),
    ("math", "en", "Compute the derivative of f(x) = x^3 * ln(x) and find where it is zero."),
    (
        "math",
        "en",
        "A fair die is rolled three times. What is the probability that the three results are strictly increasing?",
    ),
    ("math", "en", "Evaluate the integral of x * e^x from 0 to 1."),
    ("math", "en", "Is 2^61 - 1 prime? Explain what kind of number it is and how people check such numbers."),
    ("math", "en", "What is the last digit of 7^2025?"),
    ("math", "en", "Show that the product of any four consecutive integers is one less than a perfect square."),
    ("math", "en", "A rectangle has a perimeter of 46 cm and a diagonal of 17 cm. What is its area?"),
    ("math", "en", "Solve the system: 3x + 2y = 16 and 5x - y = 18."),
    ("math", "en", "What is the expected number of coin flips needed to see two heads in a row?"),
    ("math", "en", "Explain why 0.999... (repeating) equals 1, in a way a high-school student would accept."),
    ("math", "en", "Find the greatest common divisor of 1071 and 462 using the Euclidean algorithm, step by step."),
    ("code", "en", "Write a Python function that returns the n-th Fibonacci number in O(log n) time."),
    ("code", "en", "Explain the difference between a process and a thread, with an example of when to use each."),
    (
        "code",
        "en",
        "Here is a Python snippet:\n\n```python\ndef add_item(item, items=[]):\n    items.append(item)\n"
        "    return items\n```\n\nWhy does calling it twice give surprising results, and how do I fix it?",
    ),
    (
        "code",
        "en",
        "Write a SQL query that returns the second highest salary from a table employees(id, name, "
        "salary), or NULL when there is none.",
    ),
    (
        "code",
        "en",
        "In Rust, why can't I hold a mutable reference to a vector element while pushing to the vector? "
        "Show a version that compiles.",
    ),
    ("code", "en", "Implement a thread-safe LRU cache in Go with Get and Put methods."),
    ("code", "en", "What does `git rebase --onto` do? Give a concrete scenario where it is the right tool."),
    (
        "code",
        "en",
        "Write a bash one-liner that prints the 10 largest files under the current directory, with "
        "human-readable sizes.",
    ),
    (
        "code",
        "en",
        "Explain what a race condition is using a bank-account example, then show how a lock fixes it in Python.",
    ),
    ("code", "en", "Why is `asyncio.sleep(0)` sometimes used in Python async code?"),
    ("code", "en", "Write a JavaScript function debounce(fn, ms) and explain how it differs from throttle."),
    (
        "code",
        "en",
        "Convert this recursive function to an iterative one:\n\n```python\ndef depth(node):\n"
        "    if node is None:\n        return 0\n    return 1 + max(depth(node.left), depth(node.right))\n```",
    ),
    (
        "code",
        "en",
        "What is the time complexity of building a binary heap from an unsorted array, and why is it not O(n log n)?",
    ),
    ("code", "en", "Write a C function that reverses a singly linked list in place."),
    ("code", "en", "How do I read a 20 GB CSV file in Python without running out of memory?"),
    (
        "reasoning",
        "en",
        "Three boxes are labelled 'apples', 'oranges' and 'apples and oranges', and every label is "
        "wrong. You may take one fruit from one box without looking inside. How do you relabel all three boxes?",
    ),
    (
        "reasoning",
        "en",
        "A bat and a ball cost $1.10 together. The bat costs $1.00 more than the ball. How much does the ball cost?",
    ),
    (
        "reasoning",
        "en",
        "You have two ropes that each take exactly one hour to burn, but they burn unevenly. How "
        "can you measure 45 minutes?",
    ),
    (
        "reasoning",
        "en",
        "If all bloops are razzies and all razzies are lazzies, are all bloops definitely lazzies? "
        "What about the converse?",
    ),
    (
        "reasoning",
        "en",
        "A farmer must cross a river with a wolf, a goat and a cabbage. The boat holds the farmer "
        "and one item. How does he get everything across safely?",
    ),
    (
        "reasoning",
        "en",
        "There are 100 lockers, all closed. Student 1 opens every locker, student 2 toggles every "
        "second locker, student 3 every third, and so on up to student 100. Which lockers end up open?",
    ),
    (
        "reasoning",
        "en",
        "Alice is taller than Bob. Carol is shorter than Bob but taller than Dan. Eve is taller "
        "than Alice. Who is the second shortest?",
    ),
    (
        "reasoning",
        "en",
        "You are given 12 coins, one of which is counterfeit and either lighter or heavier. With "
        "a balance scale and three weighings, how do you find it and tell whether it is lighter or heavier?",
    ),
    ("reasoning", "en", "A clock shows 3:15. What is the angle between the hour hand and the minute hand?"),
    (
        "reasoning",
        "en",
        "If it takes 5 machines 5 minutes to make 5 widgets, how long would it take 100 machines to make 100 widgets?",
    ),
    (
        "reasoning",
        "en",
        "Four people need to cross a bridge at night with one torch. They take 1, 2, 5 and 10 "
        "minutes. At most two can cross at once, at the slower person's pace. What is the fastest total time?",
    ),
    (
        "reasoning",
        "en",
        "A snail climbs 3 metres up a 10-metre well each day and slips back 2 metres each night. "
        "On which day does it reach the top?",
    ),
    ("science", "en", "Why is the sky blue during the day but red at sunset?"),
    ("science", "en", "Explain how mRNA vaccines work to someone with no biology background."),
    ("science", "en", "What would happen to Earth's orbit if the Sun suddenly became a black hole of the same mass?"),
    ("science", "en", "Why does ice float on water, and why does that matter for life in lakes?"),
    ("science", "en", "How do noise-cancelling headphones work?"),
    ("writing", "en", "Write a haiku about a server room at 3 a.m."),
    ("writing", "en", "Draft a polite email to a landlord asking for a broken heater to be repaired this week."),
    ("writing", "en", "Summarise the plot of Romeo and Juliet in exactly three sentences."),
    ("writing", "en", "Write a short product description for a reusable water bottle aimed at hikers."),
    ("writing", "en", "Give me five possible titles for a blog post about learning to cook in your thirties."),
    ("knowledge", "en", "What were the main causes of the fall of the Western Roman Empire?"),
    ("knowledge", "en", "Explain the difference between weather and climate."),
    ("knowledge", "en", "What is the difference between a virus and a bacterium?"),
    ("knowledge", "en", "Why do countries have different electrical plugs and voltages?"),
    ("math", "fr", "Démontrez que la somme des n premiers entiers impairs est égale à n²."),
    (
        "math",
        "fr",
        "Un capital de 5 000 € est placé à 3 % d'intérêts composés par an. Quelle sera sa valeur après 10 ans ?",
    ),
    (
        "reasoning",
        "fr",
        "Pierre a deux fois l'âge qu'avait Marie quand il avait l'âge qu'elle a maintenant. S'il "
        "a 40 ans, quel âge a Marie ?",
    ),
    (
        "code",
        "fr",
        "Écris une fonction Python qui vérifie si une chaîne est un palindrome en ignorant les "
        "accents, les espaces et la ponctuation.",
    ),
    ("knowledge", "fr", "Quelles sont les principales différences entre la Ve République et la IVe République ?"),
    ("writing", "fr", "Rédige un court poème sur la pluie à Paris en automne."),
    ("science", "fr", "Pourquoi la Lune montre-t-elle toujours la même face à la Terre ?"),
    ("math", "de", "Wie viele verschiedene Wörter kann man aus den Buchstaben des Wortes MISSISSIPPI bilden?"),
    (
        "reasoning",
        "de",
        "Ein Vater ist heute dreimal so alt wie sein Sohn. In 12 Jahren wird er nur noch doppelt "
        "so alt sein. Wie alt sind beide heute?",
    ),
    (
        "code",
        "de",
        "Erkläre den Unterschied zwischen einer Liste und einem Tupel in Python und wann man welches verwendet.",
    ),
    ("knowledge", "de", "Was versteht man unter der Energiewende, und welche Probleme gibt es dabei?"),
    ("writing", "de", "Schreibe eine kurze, freundliche Absage auf eine Einladung zu einer Geburtstagsfeier."),
    ("science", "de", "Warum ist es im Gebirge kälter, obwohl man der Sonne näher ist?"),
    ("math", "es", "Demuestra que hay infinitos números primos."),
    ("math", "es", "Si el lado de un cuadrado aumenta un 20 %, ¿en qué porcentaje aumenta su área?"),
    ("reasoning", "es", "En una carrera adelantas al segundo. ¿En qué posición vas ahora?"),
    ("code", "es", "Escribe una función en JavaScript que agrupe una lista de objetos por una clave dada."),
    ("knowledge", "es", "¿Por qué se celebra el Día de los Muertos en México y cuáles son sus tradiciones?"),
    ("writing", "es", "Escribe un microrrelato de menos de cien palabras sobre un faro abandonado."),
    ("math", "zh", "一个等差数列的首项是3，公差是4，求前20项的和。"),
    ("math", "zh", "证明：任意三个连续整数的乘积能被6整除。"),
    ("reasoning", "zh", "鸡兔同笼，共有35个头，94只脚。问鸡和兔各有多少只？"),
    ("code", "zh", "用Python写一个函数，判断一个字符串中的括号是否匹配，支持()、[]和{}。"),
    ("knowledge", "zh", "请简要介绍一下丝绸之路的历史意义。"),
    ("writing", "zh", "写一首关于秋天月亮的五言绝句。"),
    ("science", "zh", "为什么海水是咸的，而河水是淡的？"),
    ("math", "ja", "1から100までの整数のうち、3でも5でも割り切れない数はいくつありますか。"),
    ("reasoning", "ja", "AさんはBさんより背が高く、CさんはAさんより背が高いです。一番背が低いのは誰ですか。"),
    ("code", "ja", "Pythonでリストの重複を順序を保ったまま取り除く方法を教えてください。"),
    ("knowledge", "ja", "日本の「お盆」とはどのような行事ですか。簡単に説明してください。"),
    ("writing", "ja", "雨の日の駅をテーマにした短い詩を書いてください。"),
    ("math", "ru", "Найдите все натуральные числа n, при которых n² + 1 делится на n + 1."),
    (
        "reasoning",
        "ru",
        "В комнате три выключателя, а в соседней комнате одна лампа. Войти в комнату с лампой "
        "можно только один раз. Как узнать, какой выключатель её включает?",
    ),
    ("code", "ru", "Объясните, что такое замыкание в JavaScript, и приведите пример."),
    ("knowledge", "ru", "Почему Санкт-Петербург называют северной столицей России?"),
    ("writing", "ru", "Напишите короткое поздравление коллеге с выходом на пенсию."),
    ("math", "it", "Quanti numeri di tre cifre hanno tutte le cifre diverse?"),
    ("knowledge", "it", "Perché la Torre di Pisa è pendente e come è stata stabilizzata?"),
    ("math", "pt", "Qual é a probabilidade de obter pelo menos um seis em quatro lançamentos de um dado?"),
    ("writing", "pt", "Escreva uma mensagem curta convidando os vizinhos para um almoço no domingo."),
    (
        "reasoning",
        "ko",
        "세 사람이 모자를 쓰고 한 줄로 서 있습니다. 모자는 빨간색 두 개와 파란색 세 개 중에서 골랐습니다. "
        "맨 뒤 사람부터 차례로 자기 모자 색을 모른다고 말했다면, 맨 앞 사람의 모자 색은 무엇입니까?",
    ),
    ("knowledge", "ko", "한글은 누가 언제 만들었으며, 어떤 원리로 만들어졌나요?"),
    ("math", "ar", "ما هو مجموع الأعداد من 1 إلى 1000 التي تقبل القسمة على 7؟"),
    ("knowledge", "hi", "भारत में मानसून कैसे बनता है और यह खेती के लिए क्यों ज़रूरी है?"),
    ("math", "en", "A sequence starts 1, 1, 2, 3, 5, 8. Prove that every third term is even."),
    (
        "math",
        "en",
        "What is the smallest positive integer that leaves remainder 1 when divided by 2, 3, 4, 5 and 6, "
        "and is divisible by 7?",
    ),
    ("math", "en", "Estimate how many piano tuners work in a city of two million people. State every assumption."),
    (
        "math",
        "en",
        "Two dice are thrown. Given that the sum is at least 9, what is the probability that one of them shows a 6?",
    ),
    ("math", "en", "Find the eigenvalues and eigenvectors of the matrix [[2, 1], [1, 2]]."),
    ("code", "en", "What is the difference between `let`, `const` and `var` in JavaScript?"),
    (
        "code",
        "en",
        "Review this function and suggest improvements:\n\n```python\ndef avg(xs):\n    s = 0\n"
        "    for i in range(len(xs)):\n        s = s + xs[i]\n    return s / len(xs)\n```",
    ),
    ("code", "en", "Explain what a Bloom filter is and when its false positives are acceptable."),
    ("code", "en", "Write a Dockerfile for a small Flask app that runs as a non-root user."),
    (
        "code",
        "en",
        "Why does my Python program print 0.30000000000000004 for 0.1 + 0.2, and how should I compare floats?",
    ),
    (
        "reasoning",
        "en",
        "A man looks at a portrait and says: 'Brothers and sisters I have none, but that man's "
        "father is my father's son.' Who is in the portrait?",
    ),
    (
        "reasoning",
        "en",
        "You meet two guards at two doors; one always lies and one always tells the truth. With "
        "one question to one guard, how do you find the door to freedom?",
    ),
    (
        "reasoning",
        "en",
        "Seven friends shake hands once with everyone else. How many handshakes are there? Then "
        "generalise to n friends.",
    ),
    ("science", "en", "Why can't we see stars in photos taken on the Moon's surface?"),
    ("science", "en", "How does a refrigerator move heat from inside to outside?"),
    ("writing", "en", "Write the opening paragraph of a mystery novel set on a night ferry."),
    (
        "writing",
        "en",
        "Rewrite this sentence to be clearer: 'The report that was written by the team that was "
        "hired last year was reviewed.'",
    ),
    ("knowledge", "en", "What is the difference between a stock and a bond?"),
    ("math", "fr", "Combien de zéros termine le nombre 100! (factorielle de 100) ? Justifiez."),
    ("code", "es", "¿Qué diferencia hay entre una cola y una pila? Da un ejemplo de uso de cada una."),
    ("math", "de", "Berechne die Wahrscheinlichkeit, beim Lotto 6 aus 49 genau vier Richtige zu haben."),
    (
        "reasoning",
        "zh",
        "甲、乙、丙三人中只有一人说了真话。甲说：“乙在说谎。”乙说：“丙在说谎。”丙说：“甲和乙都在说谎。”谁说了真话？",
    ),
    ("math", "ja", "半径5cmの円に内接する正六角形の面積を求めてください。"),
    ("science", "ru", "Почему при кипячении воды в горах макароны варятся дольше?"),
]

EXPLAIN = {
    "en": (
        "Explain {} in simple terms.",
        ["inflation", "photosynthesis", "a black hole", "a blockchain", "compound interest", "natural selection"],
    ),
    "fr": (
        "Explique simplement ce qu'est {}.",
        ["l'inflation", "la photosynthèse", "un trou noir", "une blockchain", "l'effet de serre"],
    ),
    "de": (
        "Erkläre einfach, was {} ist.",
        ["Inflation", "Photosynthese", "ein Schwarzes Loch", "eine Blockchain", "der Treibhauseffekt"],
    ),
    "es": (
        "Explica de forma sencilla qué es {}.",
        ["la inflación", "la fotosíntesis", "un agujero negro", "una cadena de bloques", "el efecto invernadero"],
    ),
    "zh": ("请用简单的语言解释什么是{}。", ["通货膨胀", "光合作用", "黑洞", "区块链", "温室效应"]),
    "ja": ("{}とは何か、わかりやすく説明してください。", ["インフレ", "光合成", "ブラックホール", "ブロックチェーン"]),
    "ru": ("Простыми словами объясните, что такое {}.", ["инфляция", "фотосинтез", "чёрная дыра", "блокчейн"]),
}

SENTENCES = [
    "The library closes early on public holidays.",
    "Could you send me the slides after the meeting?",
    "My grandmother grows tomatoes on her balcony.",
    "The train was delayed because of snow on the tracks.",
    "Please keep the receipt in case you need to return the item.",
    "We watched the sunrise from the top of the hill.",
    "The new bridge will open to cyclists next spring.",
    "I have been learning to play the cello for two years.",
]
TARGETS = ["French", "German", "Spanish", "Chinese", "Japanese", "Russian", "Italian", "Portuguese"]

# ---------------------------------------------------------------- templates

NAMES = [
    "Amara",
    "Ben",
    "Chloé",
    "Diego",
    "Elif",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kavya",
    "Luca",
    "Mei",
    "Nadia",
    "Omar",
    "Priya",
    "Rosa",
    "Sven",
    "Tariq",
    "Yuki",
]
CITIES = ["Lyon", "Porto", "Osaka", "Denver", "Kraków", "Nairobi", "Hobart", "Montreal", "Seville", "Tbilisi"]


def math_templates(rng: random.Random) -> list[str]:
    name, other = rng.sample(NAMES, 2)
    city_a, city_b = rng.sample(CITIES, 2)
    a, b = rng.randint(40, 90), rng.randint(60, 120)
    hours = rng.randint(2, 6)
    price, discount = rng.choice([48, 60, 75, 120, 250]), rng.choice([10, 15, 20, 25, 30])
    n = rng.randint(5, 12)
    return [
        f"Two trains leave {city_a} and {city_b}, {a * hours + b * hours} km apart, at the same time and head "
        f"towards each other at {a} km/h and {b} km/h. After how many hours do they meet?",
        f"{name} buys a jacket marked ${price} with a {discount}% discount, then pays 8% sales tax on the "
        f"discounted price. How much does {name} pay in total?",
        f"{name} can paint a fence in {hours} hours and {other} can paint it in {hours + 2} hours. How long does it "
        "take if they work together?",
        f"What is the probability that in a group of {n + 10} people at least two share a birthday? Give a "
        "numerical estimate and explain the method.",
        f"A recipe for {n} people needs {rng.randint(2, 5) * 100} g of flour. How much flour is needed for "
        f"{n + rng.randint(3, 9)} people?",
        f"Find the sum of all multiples of {rng.choice([3, 4, 6, 7, 9])} between 1 and {rng.choice([100, 250, 500])}.",
        f"A tank is filled by one pipe in {hours} hours and emptied by another in {hours * 2 + 1} hours. If both "
        "pipes are open, how long does it take to fill the empty tank?",
        f"How many diagonals does a convex polygon with {n + 3} sides have? Derive the general formula.",
        f"{name} walks at {rng.randint(4, 6)} km/h and cycles at {rng.randint(14, 22)} km/h. The trip to work is "
        f"{rng.randint(6, 15)} km. How much time does cycling save each day, counting both directions?",
        f"In how many ways can a committee of {rng.randint(3, 4)} be chosen from {n + 5} people if two of them "
        "must either both be on it or both be off it?",
    ]


CODE_TASKS = [
    "checks whether a number is prime",
    "merges two sorted lists into one sorted list",
    "counts word frequencies in a text and returns the ten most common words",
    "flattens an arbitrarily nested list",
    "parses a duration like '1h30m15s' into seconds",
    "finds the longest common prefix of a list of strings",
    "rotates a matrix by 90 degrees clockwise",
    "validates an IPv4 address",
    "computes the edit distance between two strings",
    "groups anagrams together from a list of words",
    "returns all permutations of a string without duplicates",
    "converts a Roman numeral to an integer",
]
CODE_LANGS = ["Python", "Rust", "Go", "TypeScript", "Java", "C++", "Kotlin", "Haskell"]
REASONING_TEMPLATES = [
    "{a} is older than {b}, and {c} is younger than {b}. {d} is older than {a}. List the four from youngest to "
    "oldest and explain how you know.",
    "{a} says: 'Exactly one of us is lying.' {b} says: 'We are both lying.' Who is telling the truth?",
    "{a}, {b} and {c} each own one pet: a cat, a dog and a parrot. {a} is allergic to fur and {b} doesn't own "
    "the dog. Who owns which pet?",
    "{a} has twice as many marbles as {b}. If {a} gives {b} six marbles, they have the same number. How many "
    "did each have?",
]

SYSTEMS = [
    "You are a patient math tutor. Explain each step and finish with the final answer on its own line.",
    "You are a senior software engineer. Answer with working code first, then a short explanation.",
    "You are a concise assistant. Answer in at most three sentences.",
    "Tu es un assistant qui répond toujours en français, de manière claire et précise.",
    "You are a careful logician. State your assumptions before solving the puzzle.",
    "Du bist ein hilfsbereiter Assistent und antwortest immer auf Deutsch.",
]

CONVERSATIONS: list[tuple[str, str, list[str]]] = [
    (
        "math",
        "en",
        [
            "What's a prime number?",
            "A prime is a whole number greater than 1 whose only divisors are 1 and itself, like 2, 3, 5 and 7.",
            "Then is 1 prime? And why does it matter?",
        ],
    ),
    (
        "code",
        "en",
        [
            "How do I reverse a list in Python?",
            "You can use `my_list.reverse()` to reverse it in place, or `my_list[::-1]` to get a reversed copy.",
            "Which one is faster for a list of a million items?",
        ],
    ),
    (
        "code",
        "en",
        [
            "I get 'TypeError: unhashable type: list' when building a set.",
            "Lists are mutable, so they cannot be hashed. Convert each list to a tuple before adding it to the set.",
            "What if the lists contain other lists?",
        ],
    ),
    (
        "reasoning",
        "en",
        [
            "I'm planning a 3-day trip with four museums, but two are closed on Mondays. The trip starts on a Sunday.",
            "Then visit the two Monday-closed museums on Sunday or Tuesday, and put the others on Monday.",
            "One of them only opens in the afternoon on Sundays. Can you give me a full schedule?",
        ],
    ),
    (
        "science",
        "en",
        [
            "Why do we have seasons?",
            "Seasons come from the tilt of Earth's axis, about 23.4 "
            "degrees, which changes how directly sunlight hits each hemisphere over the year.",
            "So why isn't it hottest on the longest day of the year?",
        ],
    ),
    (
        "writing",
        "en",
        [
            "Can you help me write a toast for my sister's wedding?",
            "Of course! Tell me a bit about her and her partner: how they met, and a memory you'd like to mention.",
            "They met at a climbing gym "
            "and she once carried me down a mountain when I twisted my ankle. Keep it under two minutes.",
        ],
    ),
    (
        "math",
        "en",
        [
            "What's the derivative of sin(x)^2?",
            "By the chain rule, it is 2 sin(x) cos(x), which also equals sin(2x).",
            "And the integral of sin(x)^2?",
        ],
    ),
    (
        "code",
        "en",
        [
            "My SQL query is slow: SELECT * FROM orders WHERE YEAR(created_at) = 2024.",
            "Wrapping the "
            "column in a function prevents the index on created_at from being used. Use a range instead: created_at "
            ">= '2024-01-01' AND created_at < '2025-01-01'.",
            "Would a composite index help if I also filter by customer_id?",
        ],
    ),
    (
        "knowledge",
        "fr",
        [
            "Quelle est la capitale de l'Australie ?",
            "C'est Canberra, et non Sydney comme on le croit souvent.",
            "Pourquoi a-t-on choisi Canberra plutôt que Sydney ou Melbourne ?",
        ],
    ),
    (
        "code",
        "de",
        [
            "Was ist der Unterschied zwischen == und is in Python?",
            "== vergleicht die Werte, is prüft, ob es sich um dasselbe Objekt handelt.",
            "Warum ergibt dann `a = 256; b = 256; a is b` True, aber bei 257 manchmal False?",
        ],
    ),
    (
        "math",
        "es",
        [
            "¿Cuánto es 15 % de 80?",
            "Es 12, porque 0,15 × 80 = 12.",
            "¿Y si después le aplico otro descuento del 10 % sobre el precio ya rebajado?",
        ],
    ),
    (
        "knowledge",
        "zh",
        ["长城有多长？", "根据2012年的测量，历代长城总长度约为21196公里。", "为什么古代要修建这么长的城墙？"],
    ),
    (
        "writing",
        "ja",
        [
            "友達の誕生日にメッセージを送りたいです。",
            "いいですね。どんな友達ですか？ 関係や思い出を教えてください。",
            "大学時代からの友達で、去年一緒に北海道を旅行しました。短めにお願いします。",
        ],
    ),
    (
        "reasoning",
        "ru",
        [
            "У меня есть 3-литровая и 5-литровая банки. Как отмерить 4 литра?",
            "Наполните 5-литровую банку и перелейте из неё воду в 3-литровую. В 5-литровой останется 2 литра.",
            "А что делать дальше?",
        ],
    ),
    (
        "code",
        "en",
        [
            "Explain Big-O notation briefly.",
            "Big-O describes how an algorithm's running time or memory "
            "grows with input size, ignoring constants: O(n) grows linearly, O(n^2) quadratically.",
            "Great. What is amortised complexity, and why is appending to a dynamic array O(1) amortised?",
        ],
    ),
    (
        "math",
        "en",
        [
            "Can you check my answer? I think the integral of 1/x from 1 to e is 0.",
            "Not quite: the antiderivative of 1/x is ln|x|, so the integral is ln(e) - ln(1).",
            "Oh, so it's 1. What about from 1 to e^2, and why does the area keep growing even though 1/x gets small?",
        ],
    ),
    (
        "code",
        "en",
        [
            "Should I use a dict or a dataclass for configuration in Python?",
            "A dataclass gives you "
            "named fields, type hints and immutability with frozen=True; a dict is quicker to build but easier to "
            "misspell.",
            "How would I load a TOML file into a frozen dataclass and reject unknown keys?",
        ],
    ),
    (
        "writing",
        "en",
        [
            "I need a cover letter opening for a junior data analyst job.",
            "Sure. Do you have experience you'd like to lead with, such as a project, a course or an internship?",
            "I built a dashboard of bus delays in my city as a side project. Make it confident but not arrogant.",
        ],
    ),
    (
        "reasoning",
        "en",
        [
            "I have a 7-minute and an 11-minute hourglass. Can I time exactly 15 minutes?",
            "Yes. Start both at once. When the 7-minute one runs out, 4 minutes remain in the 11-minute one.",
            "Okay, and "
            "then? Please continue and also say whether 15 minutes is possible starting the boiling at time zero.",
        ],
    ),
    (
        "knowledge",
        "es",
        [
            "¿Quién pintó el Guernica?",
            "Lo pintó Pablo Picasso en 1937, tras el bombardeo de la ciudad vasca de Guernica.",
            "¿Por qué estuvo el cuadro tantos años fuera de España?",
        ],
    ),
]

BATCH_PROMPTS = [
    "Hello world!",
    "Explain the Pythagorean theorem with a worked example.",
    "Write a Python function that checks whether a year is a leap year.",
    "What is 17 * 23? Show your working.",
    "Give three tips for writing clear commit messages.",
    "Translate 'The meeting is postponed until next Tuesday' into French and German.",
    "Why do onions make people cry?",
    "Solve for x: 2x + 7 = 31.",
    "What is the difference between TCP and UDP?",
    "Summarise the water cycle in four steps.",
    "Write a limerick about a forgetful robot.",
    "How many seconds are there in a leap year?",
    "Explain recursion to a ten-year-old.",
    "Which is larger, 2^100 or 10^30? Explain without a calculator.",
    "Suggest a name for a bakery that only sells sourdough.",
    "What causes the tides?",
    "Write a regular expression that matches an ISO 8601 date like 2024-05-31.",
    "A shop sells pens at 3 for $2. How much do 27 pens cost?",
    "Describe the rules of tic-tac-toe in two sentences.",
    "Is a tomato a fruit or a vegetable? Explain both the botanical and the culinary answer.",
]


def build_rows(rng: random.Random) -> list[dict[str, Any]]:
    """The 295 good rows in a shuffled but fixed order (ids are given later)."""
    rows: list[dict[str, Any]] = [{"category": c, "lang": lang, "prompt": text} for c, lang, text in WRITTEN]
    for lang, (template, topics) in EXPLAIN.items():
        rows += [{"category": "knowledge", "lang": lang, "prompt": template.format(t)} for t in topics]
    for sentence, target in zip(SENTENCES, rng.sample(TARGETS, len(SENTENCES)), strict=True):
        text = f'Translate into {target}, keeping the tone natural: "{sentence}"'
        rows.append({"category": "translation", "lang": "en", "prompt": text})
    for _ in range(12):
        rows += [{"category": "math", "lang": "en", "prompt": p} for p in rng.sample(math_templates(rng), 5)]
    for task in CODE_TASKS:
        for lang in rng.sample(CODE_LANGS, 3):
            rows.append(
                {
                    "category": "code",
                    "lang": "en",
                    "prompt": f"Write a {lang} function that {task}. Include a few test cases.",
                }
            )
    for template in REASONING_TEMPLATES:
        for _ in range(4):
            a, b, c, d = rng.sample(NAMES, 4)
            rows.append({"category": "reasoning", "lang": "en", "prompt": template.format(a=a, b=b, c=c, d=d)})
    for category, lang, turns in CONVERSATIONS:
        roles = ["user", "assistant"] * 2
        rows.append(
            {
                "category": category,
                "lang": lang,
                "multi_turn": True,
                "messages": [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)],
            }
        )
    with_system = rng.sample(range(len(rows)), 24)
    for i in with_system:
        row = rows[i]
        system = _system_for(row, rng)
        messages = row.pop("messages", None) or [{"role": "user", "content": row.pop("prompt")}]
        row["messages"] = [{"role": "system", "content": system}, *messages]
    rng.shuffle(rows)
    return rows[: TOTAL - len(BAD_ROWS)]


def _system_for(row: dict[str, Any], rng: random.Random) -> str:
    if row["lang"] == "fr":
        return SYSTEMS[3]
    if row["lang"] == "de":
        return SYSTEMS[5]
    by_category = {"math": SYSTEMS[0], "code": SYSTEMS[1], "reasoning": SYSTEMS[4]}
    return by_category.get(row["category"], SYSTEMS[2])


# Deliberately bad rows, placed at fixed positions: each must become a `bad_input` reject, not crash the run.
BAD_ROWS: dict[int, str | dict[str, Any]] = {
    37: {"category": "bad", "lang": "en", "prompt": ""},
    88: {"category": "bad", "lang": "en", "messages": [{"role": "user"}]},
    141: {"category": "bad", "lang": "en", "prompt": 42},
    203: '{"id": "sample-0204", "category": "bad", "lang": "en", "prompt": "an unterminated line',
    266: {"category": "bad", "lang": "en", "messages": []},
}


def prompt_lines(rng: random.Random) -> list[str]:
    good = iter(build_rows(rng))
    lines = []
    for i in range(TOTAL):
        bad = BAD_ROWS.get(i)
        if isinstance(bad, str):
            lines.append(bad)
            continue
        row = dict(bad) if bad is not None else next(good)
        lines.append(json.dumps({"id": f"sample-{i + 1:04d}", **row}, ensure_ascii=False))
    return lines


def batch_lines() -> list[str]:
    lines = []
    for i, text in enumerate(BATCH_PROMPTS, 1):
        messages = [{"role": "user", "content": text}]
        if i % 5 == 1:
            messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
        body: dict[str, Any] = {"model": "Qwen3.6-27B", "messages": messages, "max_completion_tokens": 1000}
        if i % 4 == 0:
            body.update(temperature=0.7, top_p=0.9)
        if i % 7 == 0:
            body["seed"] = 1234 + i
        request = {"custom_id": f"request-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        lines.append(json.dumps(request, ensure_ascii=False))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "data"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sample_prompts.jsonl").write_text("\n".join(prompt_lines(random.Random(20250601))) + "\n")
    (out / "sample_batch.jsonl").write_text("\n".join(batch_lines()) + "\n")


if __name__ == "__main__":
    main()
